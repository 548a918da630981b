/** What a backend that is one replica of a fleet offers (docs/architecture.md, "Fleet"). */
import type { SessionId, TenantId } from '../ids.ts';
import type { RecoveredSession } from './recovery-types.ts';

/** A session of the fleet as the engine's container labels describe it (docs/architecture.md, "Fleet"). */
export interface FleetSession {
  readonly id: SessionId;
  readonly tenant: TenantId;
  readonly labels: Readonly<Record<string, string>>;
  readonly createdAt: Date;
}

/** Where one session of the fleet is served. */
export type FleetLocation =
  | { readonly kind: 'absent' }
  /** Its owner is another live replica: forward to `url`. */
  | { readonly kind: 'remote'; readonly replicaId: string; readonly url: string }
  /** Its owner's lease is gone (or it was made by a lone server): it may be taken over. */
  | { readonly kind: 'orphan' }
  /** This replica owns it (it may still have to adopt it after a restart with the same replica id). */
  | { readonly kind: 'mine' };

/** A per-tenant session quota that holds across the fleet (docker: quota slots in the engine). */
export interface SessionQuota {
  /** Takes one of `tenant`'s `limit` slots for `sessionId`, or throws `EXEC_ERR_SESSION_LIMIT`. */
  take(tenant: string, sessionId: string, limit: number): Promise<void>;
  /** Gives the slot of `sessionId` back (nothing when it holds none). */
  release(sessionId: string): Promise<void>;
}

/** What a backend that is one replica of a fleet adds (docker with `--fleet`). */
export interface FleetBackend {
  readonly replicaId: string;
  /** The tenant quotas of the whole fleet (`--max-sessions-per-tenant`). */
  readonly quota?: SessionQuota | undefined;
  /** Every session of the fleet that belongs to `tenant`, from the engine (not from memory). */
  sessions(tenant: TenantId): Promise<FleetSession[]>;
  /** The advertised URL of a live replica of the fleet, if it is alive. */
  replicaUrl(replicaId: string): Promise<string | undefined>;
  /** Every live replica of the fleet (this one too): id -> advertised URL. */
  replicas(): Promise<ReadonlyMap<string, string>>;
  /** Sessions of every tenant whose owner's lease is gone (candidates for `takeOver`). */
  orphans(): Promise<{ readonly id: SessionId; readonly tenant: TenantId }[]>;
  /** Removes what replicas that are gone left that holds no session (their warm-pool containers). */
  sweep?(): Promise<void>;
  /** Who serves session `id` of `tenant` now. */
  locate(id: string, tenant: TenantId): Promise<FleetLocation>;
  /**
   * Claims session `id` (whose owner is gone, see `locate`) and adopts it as recovery would;
   * undefined when another replica claimed it first or it is gone.
   */
  takeOver(id: string, tenant: TenantId): Promise<RecoveredSession | undefined>;
}
