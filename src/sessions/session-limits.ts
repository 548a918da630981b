/**
 * The session limits a create checks before it starts: this server's cap and the tenant's quota
 * among its sessions. A fleet's quota across every replica is a slot per session, taken once the
 * container exists (session-manager.ts; docker/container/quota-slots.ts).
 */
import type { Config } from '../config.ts';
import { execError } from '../errors.ts';
import type { TenantId } from '../ids.ts';
import type { Metrics } from '../metrics.ts';

export interface LimitState {
  /** Tenants of this server's sessions. */
  readonly tenants: Iterable<TenantId>;
  readonly size: number;
  /** Creations under way. */
  readonly creating: number;
}

/** Refuses `count` more sessions past the server's or the tenant's limit (among this server's). */
export function checkLimits(
  state: LimitState,
  config: Pick<Config, 'maxSessions' | 'maxSessionsPerTenant'>,
  metrics: Metrics,
  tenant: TenantId,
  count = 1,
): void {
  if (state.size + state.creating + count > config.maxSessions) {
    metrics.sessionsCreated.inc({ result: 'limit' });
    throw execError('EXEC_ERR_SESSION_LIMIT', `server session limit reached (${config.maxSessions})`);
  }
  let owned = 0;
  for (const t of state.tenants) if (t === tenant) owned++;
  if (owned + count > config.maxSessionsPerTenant) {
    metrics.sessionsCreated.inc({ result: 'limit' });
    throw execError(
      'EXEC_ERR_SESSION_LIMIT',
      `session quota reached: ${owned} of ${config.maxSessionsPerTenant} sessions for this tenant`,
    );
  }
}
