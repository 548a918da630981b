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
 */
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Counter } from 'prom-client';
import { execError } from '../errors.ts';

/** Connections past `--max-connections` that Node still accepts, to answer them. */
const SPARE = 64;

/** Refusals, by what was full (`server` or `tenant`). */
type Refused = Pick<Counter<'limit'>, 'inc'>;

/** How a refused request is told to go away: after a moment, on a new connection. */
function busy(reply: FastifyReply, message: string): never {
  reply.header('retry-after', '1').header('connection', 'close');
  throw execError('EXEC_ERR_BUSY', message);
}

/**
 * Counts the server's open connections and refuses the requests of those past `max`. Call before
 * any other hook is added, so that a refused request runs none of them.
 */
export function limitServerConnections(app: FastifyInstance, max: number, refused: Refused): void {
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
