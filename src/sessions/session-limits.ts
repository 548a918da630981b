/**
 * The session limits a create checks before it starts: this server's cap and the tenant's quota
 * among its sessions. A fleet's quota across every replica is a slot per session, taken once the
 * container exists (session-manager.ts; docker/container/quota-slots.ts).
 */
import type { Config } from '../config.ts';
import { execError } from '../errors.ts';
import type { TenantId } from '../ids.ts';
import type { Metrics } from '../metrics.ts';

/** What the limits are checked against: this server's sessions and the tenant's. */
export interface LimitState {
  /** Sessions listed on this server, and those being made (reserved). */
  readonly size: number;
  /** The tenant's sessions: listed and being made. */
  readonly owned: number;
}

/** Refuses `count` more sessions past the server's or the tenant's limit (among this server's). */
export function checkLimits(
  state: LimitState,
  config: Pick<Config, 'maxSessions' | 'maxSessionsPerTenant'>,
  metrics: Metrics,
  count = 1,
): void {
  if (state.size + count > config.maxSessions) {
    metrics.sessionsCreated.inc({ result: 'limit' });
    throw execError('EXEC_ERR_SESSION_LIMIT', `server session limit reached (${config.maxSessions})`);
  }
  if (state.owned + count > config.maxSessionsPerTenant) {
    metrics.sessionsCreated.inc({ result: 'limit' });
    throw execError(
      'EXEC_ERR_SESSION_LIMIT',
      `session quota reached: ${state.owned} of ${config.maxSessionsPerTenant} sessions for this tenant`,
    );
  }
}

/**
 * Places held by creations under way, per tenant. A create checks the limits and takes its
 * place in the same turn of the event loop, and gives it back when the session is listed or
 * failed: creates that run at once (a burst, a fork's snapshot) count each other, so none
 * overshoots a limit that each alone would respect.
 */
export class Reservations {
  readonly #byTenant = new Map<TenantId, number>();
  #total = 0;

  /** Places held, all tenants together. */
  get total(): number {
    return this.#total;
  }

  /** Places held for `tenant`. */
  of(tenant: TenantId): number {
    return this.#byTenant.get(tenant) ?? 0;
  }

  /** Holds `n` places for `tenant`; the function returned gives them back (once). */
  take(tenant: TenantId, n: number): () => void {
    this.#total += n;
    this.#byTenant.set(tenant, this.of(tenant) + n);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.#total -= n;
      const left = this.of(tenant) - n;
      if (left > 0) this.#byTenant.set(tenant, left);
      else this.#byTenant.delete(tenant);
    };
  }
}
