/**
 * The boundary between the backend-independent engine and the places commands really run.
 * Nothing above `src/backends/` imports dockerode or starts a process; everything goes through here.
 */
import type { TenantId } from '../ids.ts';
import type { FleetBackend } from './fleet-types.ts';
import type { RecoveredSession } from './recovery-types.ts';
import type { BackendSession, BackendSessionSpec, SnapshotInfo, ImagePull } from './session-types.ts';

// The backend boundary's types live in one file per concern; this module is the one place the
// rest of the server imports them from.
export type * from './process-types.ts';
export type * from './session-facets.ts';
export type * from './session-types.ts';
export type * from './recovery-types.ts';
export type { FleetBackend, FleetLocation, FleetSession, SessionQuota } from './fleet-types.ts';
/** Output stream labels and client signals are wire names, defined by the protocol. */
export { SIGNAL_NAMES, type SignalName, type StreamName } from '../protocol/index.ts';

/** One engine of the pool as `/readyz` and `/metrics` report it. */
export interface EngineReport {
  /** The engine's address as configured (`unix:///...`, `tcp://host:port`). */
  readonly engine: string;
  readonly healthy: boolean;
  /** Sessions this server holds on it. */
  readonly sessions: number;
  /** Why it is not healthy or not ready (no answer, default image missing...). */
  readonly reason?: string | undefined;
}

/** One warm pool as `/metrics` reports it: a runtime's pool (`runc`) or a live template's (`template:NAME`). */
export interface WarmPoolReport {
  readonly pool: string;
  /** Containers waiting in it now. */
  readonly ready: number;
  /** The size it aims at now (self-sized, or a template pool's size once its template is found). */
  readonly target: number;
}

export type BackendKind = 'local' | 'docker';
/**
 * Where sessions run: the one interface the server above `src/backends/` sees of a backend
 * (docs/architecture.md, "Where to add"). It makes and recovers sessions; each runs its commands.
 */
/** The memory checkpoints a backend keeps (live templates, forks), read by /metrics at scrape time. */
export interface MemoryCheckpointTotals {
  readonly count: number;
  readonly bytes: number;
  /**
   * Failed memory snapshots whose image or checkpoint could not be removed, by what was left,
   * since the start; only once one was (a labelled counter's series appear at their first count).
   */
  readonly cleanupFailures?: Readonly<Partial<Record<'image' | 'checkpoint', number>>>;
}

export interface Backend {
  readonly kind: BackendKind;
  /** Throws `EXEC_ERR_BACKEND_UNAVAILABLE` quickly when the backend cannot serve (readyz). */
  ping(): Promise<void>;
  /**
   * Why a default session cannot start although `ping` succeeds (docker: the default image is
   * missing, or still being pulled), naming the fix; undefined when ready. Reported by
   * `/readyz` and at boot. Absent on backends with no such precondition.
   */
  notReadyReason?(): Promise<string | undefined>;
  /** Optional: the image pulls in flight that `tenant`'s session creations wait for (docker). */
  imagePulls?(tenant: TenantId): ImagePull[];
  createSession(spec: BackendSessionSpec): Promise<BackendSession>;
  /**
   * Startup recovery: sessions this server instance left behind that can be re-adopted
   * (their processes are gone; the filesystem lives on). Orphans that cannot be adopted are
   * removed by the backend itself.
   */
  recover(): Promise<RecoveredSession[]>;
  /** Snapshots owned by `tenant` (all when undefined). */
  listSnapshots(tenant: TenantId | undefined): Promise<SnapshotInfo[]>;
  deleteSnapshot(snapshotId: string, tenant: TenantId | undefined): Promise<void>;
  /** Optional: the memory checkpoints (live templates, forks) this backend keeps, for /metrics. */
  memoryCheckpoints?(): MemoryCheckpointTotals;
  /** Stops everything this backend created (server shutdown). */
  close(): Promise<void>;
  /**
   * Optional (docker): closes the backend leaving every session and process running for the
   * next server of the instance, as a killed server would (`--shutdown-sessions keep`).
   */
  handOver?(): Promise<void>;
  /** Optional: the engines of a pool with their health and sessions (`/readyz`, `/metrics`). */
  engines?(): EngineReport[];
  /** Optional (docker): every warm pool with what it holds and aims at (`/metrics`), summed over engines. */
  warmPools?(): WarmPoolReport[];
  /** Present when this server is one replica of a fleet (`--fleet`, docker). */
  readonly fleet?: FleetBackend | undefined;
}
