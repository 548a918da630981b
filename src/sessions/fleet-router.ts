/**
 * Where a session of a fleet is served (docs/architecture.md, "Fleet"): on this replica, at the
 * live replica that owns it, or here after a take-over when its owner's lease is gone; and the
 * scan that takes over such sessions even when nobody uses them (so they are reaped).
 */
import { execError } from '../errors.ts';
import type { FleetBackend } from '../backends/types.ts';
import type { TenantId } from '../ids.ts';
import type { Session } from './session.ts';

/** Where a session is served (`SessionManager.route`). */
export type SessionRoute =
  | { readonly kind: 'local'; readonly session: Session }
  | { readonly kind: 'remote'; readonly url: string; readonly replicaId: string }
  | { readonly kind: 'absent' };

/** How often a replica looks for sessions whose owner is gone (plus up to 5 s, so replicas spread). */
const ORPHAN_SCAN_MS = 30_000;

/** After losing a take-over: how many times, and how far apart, the winner's claim is looked for. */
const CLAIM_LOOKS = 20;
const CLAIM_LOOK_MS = 100;

/** What the router asks of the session manager: the sessions here, adoption, and whether it is closing. */
export interface FleetRouterDeps {
  /** Undefined without a fleet: a session is here or nowhere. */
  readonly fleet: FleetBackend | undefined;
  /** The session of this id on this replica, if any. */
  local(id: string): Session | undefined;
  /** Claims and adopts session `id` (its owner is gone): undefined when another replica got it first. */
  adopt(id: string, tenant: TenantId): Promise<Session | undefined>;
  /** The server is shutting down: nothing is taken over any more. */
  closing(): boolean;
}

/**
 * Where a request for a session goes in a fleet: here, its live owner, or a take-over
 * (docs/architecture.md, "Fleet").
 */
export class FleetRouter {
  readonly #deps: FleetRouterDeps;
  /** Take-overs in flight: two requests for one orphan take it over once. */
  readonly #takingOver = new Map<string, Promise<Session | undefined>>();
  #scan: NodeJS.Timeout | undefined;

  constructor(deps: FleetRouterDeps) {
    this.#deps = deps;
  }

  async route(id: string, tenant: TenantId): Promise<SessionRoute> {
    const { fleet } = this.#deps;
    const local = this.#deps.local(id);
    if (local !== undefined) return local.tenant === tenant ? { kind: 'local', session: local } : { kind: 'absent' };
    if (fleet === undefined || this.#deps.closing()) return { kind: 'absent' };
    const where = await fleet.locate(id, tenant);
    if (where.kind === 'absent') return where;
    if (where.kind === 'remote') return { kind: 'remote', url: where.url, replicaId: where.replicaId };
    let taking = this.#takingOver.get(id);
    if (taking === undefined) {
      taking = this.#deps.adopt(id, tenant).finally(() => this.#takingOver.delete(id));
      this.#takingOver.set(id, taking);
    }
    const session = await taking;
    if (session !== undefined) return { kind: 'local', session };
    return this.#claimedElsewhere(fleet, id, tenant);
  }

  /**
   * Another replica claimed session `id` first: it serves it now. Its claim's name is taken
   * before the engine lists the claim (the losing create's 409 may come first), so for a moment
   * the session still looks orphaned: it is looked up again, briefly. Answering "absent" then
   * would tell a client its session is gone (404) while it is being taken over.
   */
  async #claimedElsewhere(fleet: FleetBackend, id: string, tenant: TenantId): Promise<SessionRoute> {
    for (let look = 0; look < CLAIM_LOOKS; look++) {
      if (look > 0) await new Promise((resolve) => setTimeout(resolve, CLAIM_LOOK_MS));
      const again = await fleet.locate(id, tenant);
      if (again.kind === 'remote') return { kind: 'remote', url: again.url, replicaId: again.replicaId };
      if (again.kind === 'absent') return again;
    }
    throw execError('EXEC_ERR_BACKEND_UNAVAILABLE', `session ${id} is being taken over by another replica: try again`);
  }

  /**
   * After the owner at `url` did not answer: waits (up to `waitMs`) for its lease to end or for
   * the session to move, then routes again. Its lease ends with its engine connection, a moment
   * after the process died.
   */
  async rerouteAfterFailure(id: string, tenant: TenantId, url: string, waitMs = 10_000): Promise<SessionRoute> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      const route = await this.route(id, tenant);
      if (route.kind !== 'remote' || route.url !== url || Date.now() >= deadline) return route;
    }
  }

  /**
   * In a fleet: sessions whose owner is gone are taken over (then reaped) even when unused, and
   * the warm-pool containers such replicas left are removed.
   */
  startScan(): void {
    if (this.#deps.fleet === undefined || this.#scan !== undefined) return;
    this.#scan = setInterval(() => void this.#takeOrphans(), ORPHAN_SCAN_MS + Math.random() * 5000).unref();
  }

  stop(): void {
    clearInterval(this.#scan);
  }

  async #takeOrphans(): Promise<void> {
    // Warm-pool containers of replicas that are gone hold no session: nobody takes them over.
    await this.#deps.fleet?.sweep?.().catch(() => undefined);
    const orphans = (await this.#deps.fleet?.orphans().catch(() => undefined)) ?? [];
    for (const o of orphans) if (!this.#deps.closing()) await this.route(o.id, o.tenant).catch(() => undefined);
  }
}
