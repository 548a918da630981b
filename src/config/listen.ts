/** The one grammar of the server's listen address (`--listen ws://HOST:PORT`). */
import { ConfigError } from './config-error.ts';

/** Where the server listens when not told, and where the CLI looks for it. */
export const DEFAULT_LISTEN = 'ws://127.0.0.1:8765';

/** Parsed `--listen` value. */
export interface ListenAddress {
  readonly host: string;
  readonly port: number;
}

const LISTEN = /^ws:\/\/(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})\/?$/;

/** Parses `ws://HOST:PORT` (IPv6 in brackets); anything else is a clear error. */
export function parseListen(value: string): ListenAddress {
  const m = LISTEN.exec(value);
  if (!m || m[1] === undefined || m[2] === undefined) {
    throw new ConfigError(
      `--listen / EXEC_SERVER_LISTEN: unsupported address ${JSON.stringify(value)}; expected ws://HOST:PORT`,
    );
  }
  const port = Number(m[2]);
  if (port > 65535) throw new ConfigError(`--listen: port ${port} is out of range`);
  return { host: m[1].replace(/^\[|\]$/g, ''), port };
}

/** The port of a listen address, or undefined when it does not parse (for messages). */
export function listenPort(value: string): number | undefined {
  try {
    return parseListen(value).port;
  } catch {
    return undefined;
  }
}

/** True for addresses only this machine can reach. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}
