/**
 * HTTP and WebSocket proxying to a port inside a session. Each proxied request or WebSocket gets
 * its own connection from the backend (`BackendSession.connectPort`): Node's HTTP client speaks
 * HTTP/1.1 over it (`createConnection`), so the request and response stream in both directions
 * with backpressure and nothing is buffered whole; an upgrade request is written to it as it
 * came and the two sockets are then piped together, so the application's own handshake, subprotocols
 * and extensions pass unchanged. A connection idle for `IDLE_MS` is ended.
 */
import {
  request as httpRequest,
  STATUS_CODES,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type ServerResponse,
} from 'node:http';
import type { Duplex } from 'node:stream';
import { execError, ExecServerError, httpErrorBody } from '../errors.ts';

const IDLE_MS = 10 * 60_000;

/** Headers that describe one hop, never forwarded (RFC 9110 section 7.6.1). */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** Where a preview request goes: a connection to the session's port, the path and the headers to send. */
export interface ProxyTarget {
  /** A new connection to the port. */
  open(): Promise<Duplex>;
  /** Path and query the application sees. */
  readonly path: string;
  /** Request headers to send (already stripped of what authenticated the caller to us). */
  readonly headers: IncomingHttpHeaders;
  /**
   * Headers added to every answer of the application. A `content-security-policy` is sent
   * besides the application's own (a browser enforces both); any other replaces the application's.
   */
  readonly responseHeaders?: OutgoingHttpHeaders | undefined;
  /**
   * In a fleet, for a port on another replica: watches that replica while its answer is awaited
   * (`watchOwner`, src/transport/owner-watch.ts) and calls `silent` once it answered neither
   * for 10 s; returns the stop. A paused owner accepts the connection and never answers, and
   * the idle bound alone (`IDLE_MS`) would hold the caller for minutes.
   */
  readonly watch?: ((silent: () => void) => () => void) | undefined;
}

/** Destroys `upstream` with EXEC_ERR_BACKEND_UNAVAILABLE once `target`'s replica is silent; the returned function stops watching. */
function watchReplica(target: ProxyTarget, upstream: Duplex): () => void {
  const unwatch = target.watch?.(() =>
    upstream.destroy(
      execError('EXEC_ERR_BACKEND_UNAVAILABLE', 'the replica serving this session answered nothing, nor its /healthz'),
    ),
  );
  if (unwatch === undefined) return () => undefined;
  upstream.once('close', unwatch);
  return unwatch;
}

/** The application's answer headers, hop-by-hop ones dropped and the target's own added. */
function answerHeaders(answer: IncomingMessage, extra: OutgoingHttpHeaders | undefined): OutgoingHttpHeaders {
  const headers: Record<string, string | string[] | number> = {};
  for (const [name, value] of Object.entries(answer.headers))
    if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
  for (const [name, value] of Object.entries(extra ?? {})) {
    const theirs = headers[name];
    if (value === undefined) continue;
    if (name === 'content-security-policy' && theirs !== undefined)
      headers[name] = [...(Array.isArray(theirs) ? theirs : [String(theirs)]), String(value)];
    else headers[name] = value;
  }
  return headers;
}

/** Ends `streams` when none of them carried data for `IDLE_MS`. */
function idleGuard(...streams: Duplex[]): void {
  let timer: NodeJS.Timeout | undefined;
  const end = (): void => {
    for (const s of streams) s.destroy();
  };
  const touch = (): void => {
    clearTimeout(timer);
    timer = setTimeout(end, IDLE_MS);
    timer.unref();
  };
  for (const s of streams) {
    s.on('data', touch);
    s.once('close', () => clearTimeout(timer));
  }
  touch();
}

function forwardHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const connectionTokens = String(headers['connection'] ?? '')
    .split(',')
    .map((t) => t.trim().toLowerCase());
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || connectionTokens.includes(name)) continue;
    out[name] = value;
  }
  return out;
}

/**
 * Why the port could not be reached: a registry error keeps its code (and so its one status); a
 * socket's own failure (ECONNREFUSED, a reset...) is the backend's, EXEC_ERR_BACKEND (502).
 */
function unreachable(err: unknown): ExecServerError {
  const code = err instanceof ExecServerError ? err.code : 'EXEC_ERR_BACKEND';
  const message = err instanceof Error ? err.message : String(err);
  return execError(code, `preview port unreachable: ${message}`, { cause: err });
}

function badGateway(res: ServerResponse, err: unknown): void {
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  const e = unreachable(err);
  res.writeHead(e.statusCode, { 'content-type': 'application/json' });
  res.end(JSON.stringify(httpErrorBody(e)));
}

/** Proxies one HTTP request over a new connection to the port; answers 502 when it cannot be reached. */
export function proxyHttp(req: IncomingMessage, res: ServerResponse, target: ProxyTarget): void {
  target.open().then(
    (upstream) => {
      // The port's stream may fail at any time (nothing listens there: the relay reports it
      // after the stream opened); an unheard stream error would end the process.
      upstream.on('error', (err) => badGateway(res, err));
      if (upstream.destroyed)
        return badGateway(res, upstream.errored ?? execError('EXEC_ERR_BACKEND', 'the port closed at once'));
      // The caller went away while the connection was made.
      if (res.destroyed) {
        upstream.destroy();
        return;
      }
      idleGuard(upstream);
      forward(req, res, target, upstream, watchReplica(target, upstream));
    },
    (err: unknown) => badGateway(res, err),
  );
}

/** Sends the request over `upstream` (Node's HTTP client speaks HTTP/1.1 on it) and streams the answer back. */
function forward(
  req: IncomingMessage,
  res: ServerResponse,
  target: ProxyTarget,
  upstream: Duplex,
  answered: () => void,
): void {
  // A chunked body keeps its framing (the server's parser accepts only codings that end in
  // `chunked`). Node's client frames a body it has no length for only for methods that usually
  // carry one: a chunked GET, DELETE or OPTIONS would otherwise reach the application bare
  // after its head, to be read there as a request of its own.
  const te = req.headers['transfer-encoding'];
  const chunked = te === undefined ? {} : { 'transfer-encoding': te };
  const outgoing = httpRequest({
    method: req.method,
    path: target.path,
    headers: { ...forwardHeaders(target.headers), ...chunked, connection: 'close' },
    createConnection: () => upstream,
  });
  outgoing.on('response', (answer) => {
    answered();
    res.writeHead(answer.statusCode ?? 502, answer.statusMessage, answerHeaders(answer, target.responseHeaders));
    answer.pipe(res);
    answer.once('error', () => res.destroy());
  });
  outgoing.on('error', (err) => badGateway(res, err));
  res.once('close', () => {
    if (!res.writableFinished) {
      outgoing.destroy();
      upstream.destroy();
    }
  });
  req.pipe(outgoing);
}

/** The request line and headers of an upgrade request, as the application must see them. */
function upgradeHead(req: IncomingMessage, target: ProxyTarget): string {
  const lines = [`${req.method ?? 'GET'} ${target.path} HTTP/1.1`];
  for (const [name, value] of Object.entries(target.headers)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) lines.push(`${name}: ${v.replace(/[\r\n]/g, '')}`);
  }
  return `${lines.join('\r\n')}\r\n\r\n`;
}

/** Tunnels an upgrade (WebSocket) request: the client's socket and the port's, piped together. */
export function proxyUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, target: ProxyTarget): void {
  socket.on('error', () => socket.destroy());
  target.open().then(
    (upstream) => {
      if (socket.destroyed) {
        upstream.destroy();
        return;
      }
      if (upstream.destroyed)
        return refuseUpgrade(socket, upstream.errored ?? execError('EXEC_ERR_BACKEND', 'the port closed at once'));
      // Until the port answered, a failure (nothing listens there) is told as HTTP, as before
      // the stream opened; after it, the tunnel just ends.
      let answered = false;
      let refused = false;
      const unwatch = watchReplica(target, upstream);
      upstream.once('data', () => {
        answered = true;
        unwatch();
      });
      upstream.on('error', (err) => {
        if (answered) return socket.destroy();
        refused = true;
        refuseUpgrade(socket, err);
      });
      upstream.write(upgradeHead(req, target));
      if (head.length > 0) upstream.write(head);
      idleGuard(socket, upstream);
      socket.pipe(upstream);
      upstream.pipe(socket);
      socket.once('close', () => upstream.destroy());
      // A refusal ends the socket once its answer is written.
      upstream.once('close', () => refused || socket.destroy());
    },
    (err: unknown) => refuseUpgrade(socket, err),
  );
}

/** Answers an upgrade whose port cannot be reached with the registry's error, as HTTP. */
function refuseUpgrade(socket: Duplex, err: unknown): void {
  if (socket.destroyed || !socket.writable) return;
  const e = unreachable(err);
  const body = JSON.stringify(httpErrorBody(e));
  socket.end(
    `HTTP/1.1 ${e.statusCode} ${STATUS_CODES[e.statusCode]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}
