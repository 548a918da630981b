/**
 * The one grammar of Docker engine addresses: `unix:///path`, a bare socket path, `tcp://`,
 * `http://`, `https://`, and lists of them (`--docker-host a,b`: a pool). The configuration
 * checks it at boot (the flag, `EXEC_SERVER_DOCKER_HOST`, `DOCKER_HOST`) and the engine client
 * connects by it, so an address that passes the one is understood by the other.
 */
import { ConfigError } from './config-error.ts';
import { commaEntries } from './lists.ts';

/** The engine's socket when no address is given. */
export const DEFAULT_DOCKER_SOCKET = '/var/run/docker.sock';

/** Engines one server may pool (`--docker-host a,b,...`). */
export const MAX_ENGINES = 64;

/** An engine address, parsed. */
export type DockerHostAddress =
  | { readonly kind: 'socket'; readonly path: string }
  | {
      readonly kind: 'tcp';
      readonly protocol: 'http' | 'https';
      readonly host: string;
      /** As given; undefined: the default of the protocol (2375 plain, 2376 with TLS). */
      readonly port: string | undefined;
    };

const EXPECTED = 'expected unix:///path/to/docker.sock or tcp://HOST:PORT';

/** Parses one engine address; `where` names its source in the error (`--docker-host`, `DOCKER_HOST`). */
export function parseDockerHost(value: string, where: string): DockerHostAddress {
  if (value.startsWith('/')) return { kind: 'socket', path: value };
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError(`${where}: ${JSON.stringify(value)} is not an address; ${EXPECTED}`);
  }
  if (url.protocol === 'unix:' && url.pathname.length > 1) return { kind: 'socket', path: url.pathname };
  if (['tcp:', 'http:', 'https:'].includes(url.protocol) && url.hostname !== '') {
    const https = url.protocol === 'https:';
    return {
      kind: 'tcp',
      protocol: https ? 'https' : 'http',
      host: url.hostname,
      port: url.port === '' ? undefined : url.port,
    };
  }
  throw new ConfigError(`${where}: unsupported docker host ${JSON.stringify(value)}; ${EXPECTED}`);
}

/** Checks a list of engine addresses (no blank entry, none twice, at most MAX_ENGINES); returns them. */
export function dockerHostList(value: string, where: string): string[] {
  const engines = commaEntries(value);
  if (engines.some((e) => e === ''))
    throw new ConfigError(`${where}: ${JSON.stringify(value)} has an empty engine address`);
  if (new Set(engines).size !== engines.length)
    throw new ConfigError(`${where}: ${JSON.stringify(value)} names an engine twice`);
  if (engines.length > MAX_ENGINES) throw new ConfigError(`${where}: at most ${MAX_ENGINES} engines`);
  for (const engine of engines) parseDockerHost(engine, where);
  return engines;
}
