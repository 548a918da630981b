/**
 * Bounds on the server's client connections (docs/protocol.md, "Connection limits"). Each open
 * TCP connection holds a descriptor, and a WebSocket its buffers, for as long as the client keeps
 * it; without a bound one client, or one tenant, could take the descriptors that the sessions'
 * agent links and engine calls need, and every other tenant with them.
 *
 * - The server: at most `--max-connections` at once (HTTP, WebSocket, preview, other replicas').
 *   A request on a connection past it is answered 429 `EXEC_ERR_BUSY` before anything runs
 *   (routing, authentication) and the connection closed. Past that and a small spare, Node
 *   drops new connections unanswered (`server.maxConnections`), so that even those answers take
 *   a bounded number of descriptors.
 * - A tenant: at most `--max-websockets-per-tenant` WebSocket connections at once. Only
 *   WebSockets are counted per tenant: one HTTP connection can carry many tenants' requests
 *   through a proxy. An upgrade past it is answered 429 `EXEC_ERR_BUSY` instead of upgraded.
 * - Time: a place held without doing anything is given back. A request head must be complete
 *   within `--headers-timeout-ms`, a request body must keep arriving (`--request-idle-timeout-ms`
 *   between bytes: an idle timeout, so a slow upload that progresses goes on), and a response
 *   waiting for the client must be read likewise; a connection with no request in flight closes
 *   after the keep-alive timeout (after a response) or as long idle, and a WebSocket must
 *   send its first message within `--ws-initialize-timeout-ms` (websocket-route.ts). Node's
 *   own timers do the work (`headersTimeout`, the socket inactivity timeout `server.timeout`,
 *   `keepAliveTimeout`); only the decision of what an idle socket means is here. The
 *   server's turn (a handler running, a long poll, a stream) is never cut.
 */
import type { IncomingMessage, ServerOptions, ServerResponse } from 'node:http';
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Counter } from 'prom-client';
import { execError, httpErrorBody } from '../errors.ts';

/** Connections past `--max-connections` that Node still accepts, to answer them. */
const SPARE = 64;

/**
 * How long a connection after a response may wait for its next request. Fastify's default,
 * kept: longer than the 60 s idle timeout of common load balancers, which then close first.
 */
export const KEEP_ALIVE_TIMEOUT_MS = 72_000;

/** Refusals and closes, by what was full (`server` or `tenant`) or too slow (`headers`, `idle`, `initialize`). */
type Refused = Pick<Counter<'limit'>, 'inc'>;

/** How a refused request is told to go away: after a moment, on a new connection. */
function busy(reply: FastifyReply, message: string): never {
  reply.header('retry-after', '1').header('connection', 'close');
  throw execError('EXEC_ERR_BUSY', message);
}

/**
 * Counts the server's open connections and refuses the requests of those past
 * `--max-connections`, and closes those idle past their bounds (`limitIdleConnections`). Call
 * before any other hook is added, so that a refused request runs none of them.
 */
export function limitServerConnections(
  app: FastifyInstance,
  o: { maxConnections: number; requestIdleTimeoutMs: number },
  refused: Refused,
): void {
  const max = o.maxConnections;
  limitIdleConnections(app, o.requestIdleTimeoutMs, refused);
  app.server.maxConnections = max + SPARE;
  const over = new WeakSet<Socket>();
  let open = 0;
  // First among the listeners, so the count includes this connection before Node reads from it.
  app.server.prependListener('connection', (socket: Socket) => {
    open++;
    if (open > max) over.add(socket);
    socket.once('close', () => {
      open--;
    });
  });
  app.addHook('onRequest', async (request, reply) => {
    if (!over.has(request.raw.socket)) return;
    refused.inc({ limit: 'server' });
    busy(reply, `this server has ${max} connections open (--max-connections); try again later`);
  });
}

/**
 * WebSocket places per tenant: `take` (a route's `preHandler`, after authentication) refuses an
 * upgrade past `max`, and the place is given back when the connection's socket closes, whether
 * or not the upgrade happened.
 */
export class TenantWebSockets {
  readonly #max: number;
  readonly #refused: Refused;
  readonly #open = new Map<string, number>();

  constructor(max: number, refused: Refused) {
    this.#max = max;
    this.#refused = refused;
  }

  /** Open WebSocket connections of `tenant` (placed, not yet closed). */
  count(tenant: string): number {
    return this.#open.get(tenant) ?? 0;
  }

  readonly take = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    // A plain GET of the WebSocket URL (no upgrade) holds no place.
    if (request.headers.upgrade?.toLowerCase() !== 'websocket') return;
    const tenant = request.tenant;
    const n = this.count(tenant);
    if (n >= this.#max) {
      this.#refused.inc({ limit: 'tenant' });
      busy(reply, `tenant ${tenant} has ${this.#max} WebSocket connections open (--max-websockets-per-tenant)`);
    }
    this.#open.set(tenant, n + 1);
    request.raw.socket.once('close', () => {
      const left = this.count(tenant) - 1;
      if (left > 0) this.#open.set(tenant, left);
      else this.#open.delete(tenant);
    });
  };
}

/** The time bounds of connections (module comment) that Fastify passes to Node's HTTP server. */
export function connectionTimeouts(o: { headersTimeoutMs: number; requestIdleTimeoutMs: number }): {
  http: ServerOptions;
  connectionTimeout: number;
  keepAliveTimeout: number;
} {
  return {
    // Node checks the heads' age every `connectionsCheckingInterval` (30 s by default, which would
    // double a 30 s bound): a quarter of the bound keeps a head's close within 1.25 times it.
    http: {
      headersTimeout: o.headersTimeoutMs,
      connectionsCheckingInterval: Math.min(30_000, Math.max(25, Math.floor(o.headersTimeoutMs / 4))),
    },
    // The socket inactivity timeout (`server.timeout`): what it means is decided by `limitIdleConnections`.
    connectionTimeout: o.requestIdleTimeoutMs,
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
  };
}

/** The socket's request still being read and its response, as Node's HTTP server keeps them. */
interface HttpSocket extends Socket {
  parser?: { incoming?: IncomingMessage | null } | null;
  _httpMessage?: ServerResponse | null;
}

/**
 * What a socket idle for `server.timeout` (or, after a response, the keep-alive timeout) means:
 * a client that owes body bytes and sends none is answered 400 and closed, one that reads none of
 * the response waiting for it is closed; a connection with no request in flight is closed (Node's
 * own default); one whose request is complete waits for its handler, however long (long polls,
 * streams, image pulls). Registering the listener tells Node not to destroy idle sockets
 * itself. Upgraded sockets never get here (Node stops listening).
 */
function limitIdleConnections(app: FastifyInstance, idleMs: number, closed: Refused): void {
  app.server.on('clientError', (err: { code?: string }) => {
    // Answered (400) and closed by the app's clientErrorHandler; only counted here.
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') closed.inc({ limit: 'headers' });
  });
  app.server.on('timeout', (socket: HttpSocket) => {
    const request = socket.parser?.incoming ?? undefined;
    const response = socket._httpMessage ?? undefined;
    if (request === undefined || request.complete) {
      // Bytes of the response waiting all this time: the client stopped reading (a download's
      // reader that reads slowly makes progress, which restarts the timer).
      const unread = response !== undefined && socket.writableLength > 0;
      if (unread) closed.inc({ limit: 'idle' });
      if (response === undefined || unread) socket.destroy();
      return;
    }
    // Bytes the server has not read yet, or a socket it paused: the wait is the server's, not the client's.
    if (socket.isPaused() || request.readableLength > 0 || socket.readableLength > 0) return;
    closed.inc({ limit: 'idle' });
    if (response !== undefined && !response.headersSent && socket.writable) {
      const e = execError(
        'EXEC_ERR_INVALID_REQUEST',
        `request body: nothing received for ${idleMs} ms (--request-idle-timeout-ms)`,
      );
      const body = JSON.stringify(httpErrorBody(e));
      socket.write(
        `HTTP/1.1 ${e.statusCode} ${STATUS_CODES[e.statusCode]}\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    }
    socket.destroy();
  });
}
