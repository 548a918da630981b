/**
 * Draining, the first half of a rollout (`--shutdown-sessions keep`, docs/kubernetes.md): the
 * replica fails `/readyz` and refuses new requests, so the Service sends nobody new, then tells
 * each WebSocket client to reconnect (`server/draining`, then close code 1012) before the
 * server closes. Clients reconnect through the Service to another replica (or to this one's
 * successor) and resume their sessions, which stay in the engine meanwhile.
 */
import type { FastifyInstance } from 'fastify';
import type { Backend } from '../backends/types.ts';
import type { Config } from '../config.ts';
import { execError, httpErrorBody } from '../errors.ts';
import type { DrainingNotification } from '../protocol/index.ts';
import { routedPath } from './auth-hook.ts';

/**
 * Whether SIGTERM leaves the sessions for others: always in a fleet (another replica takes them
 * over), with `--shutdown-sessions keep` for a single server's successor; never on a backend
 * whose sessions cannot outlive the process (local).
 */
export function keepsSessions(config: Pick<Config, 'fleet' | 'shutdownSessions'>, backend: Backend): boolean {
  return (config.fleet || config.shutdownSessions === 'keep') && backend.handOver !== undefined;
}

/** WebSocket close code of a drained connection: 1012 "service restart", reconnect and resume. */
export const DRAIN_CLOSE_CODE = 1012;

/** One open WebSocket connection as draining sees it. */
export interface DrainTarget {
  notify(params: DrainingNotification): void;
  close(code: number, reason: string): void;
}

/** How long after the notification the connection is closed: room for the frame to leave. */
const NOTIFY_TO_CLOSE_MS = 100;

/** The drain of a rollout: fails readiness, refuses new requests, and sends every client away to resume elsewhere. */
export class Drain {
  readonly #targets = new Set<DrainTarget>();
  #draining = false;
  /** Suggested wait before reconnecting, sent to clients. */
  readonly retryAfterMs: number;

  constructor(retryAfterMs = 500) {
    this.retryAfterMs = retryAfterMs;
  }

  get draining(): boolean {
    return this.#draining;
  }

  /** Registers an open connection; returns its removal (on close). */
  add(target: DrainTarget): () => void {
    this.#targets.add(target);
    return () => this.#targets.delete(target);
  }

  /**
   * Fails readiness, tells every connection to reconnect and closes it with 1012. Idempotent;
   * resolves once every close is sent.
   */
  async start(reason = 'server is draining (rollout): reconnect to resume the session'): Promise<number> {
    if (this.#draining) return 0;
    this.#draining = true;
    const targets = [...this.#targets];
    const note: DrainingNotification = { reason, reconnect: true, retryAfterMs: this.retryAfterMs };
    for (const t of targets) t.notify(note);
    await new Promise((r) => setTimeout(r, NOTIFY_TO_CLOSE_MS));
    for (const t of targets) t.close(DRAIN_CLOSE_CODE, 'draining: reconnect and resume');
    return targets.length;
  }
}

/** Paths a draining server still answers: liveness and (failing) readiness. */
const STILL_ANSWERED = new Set(['/healthz', '/readyz']);

/** While draining, every new request but `/healthz` and `/readyz` gets 503 `EXEC_ERR_SHUTTING_DOWN`. */
export function registerDrainGate(app: FastifyInstance, drain: Drain): void {
  app.addHook('onRequest', async (request, reply) => {
    if (!drain.draining) return;
    const path = routedPath(request.url);
    if (path === '/readyz' || !STILL_ANSWERED.has(path)) {
      const err = execError('EXEC_ERR_SHUTTING_DOWN', 'server is draining; retry on another replica');
      return reply.code(503).header('connection', 'close').send(httpErrorBody(err));
    }
  });
}
