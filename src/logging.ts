/**
 * The server's logger: pino on stderr, bearer tokens redacted wherever they appear. `json`
 * writes pino's own lines (for collectors); `pretty` writes one readable line per entry through
 * pino-pretty (for a terminal); `auto` picks pretty when stderr is a terminal.
 */
import type { FastifyBaseLogger } from 'fastify';
import pino from 'pino';
import pretty from 'pino-pretty';

export type LogFormat = 'auto' | 'json' | 'pretty';

const REDACT = [
  'req.headers.authorization',
  'headers.authorization',
  'req.headers["sec-websocket-protocol"]',
  '*.token',
  '*.tokens',
  'config.token',
  'config.tokens',
];

/** Resolves `auto` against whether `stream` is a terminal. */
export function resolveLogFormat(
  format: LogFormat,
  stream: { isTTY?: boolean | undefined } = process.stderr,
): 'json' | 'pretty' {
  if (format !== 'auto') return format;
  return stream.isTTY === true ? 'pretty' : 'json';
}

/**
 * Builds the logger `main.ts` passes to `buildApp`. `destination` is for tests (a writable
 * that collects lines); the server writes to fd 2.
 */
export function createLogger(
  level: string,
  format: LogFormat = 'json',
  destination?: NodeJS.WritableStream,
): FastifyBaseLogger {
  const options = { level, redact: { paths: REDACT, censor: '[redacted]' } };
  if (resolveLogFormat(format) === 'pretty') {
    const stream = pretty({
      destination: destination ?? 2,
      sync: destination !== undefined,
      colorize: destination === undefined && process.stderr.isTTY === true,
      translateTime: 'SYS:HH:MM:ss.l',
      ignore: 'pid,hostname',
      singleLine: true,
    });
    return pino(options, stream);
  }
  return pino(options, destination ?? pino.destination({ fd: 2, sync: false }));
}
