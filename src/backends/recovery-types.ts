/**
 * What a backend hands back of sessions it kept across a server restart or a fleet take-over
 * (`Backend.recover`, `FleetBackend.takeOver`).
 */
import type { TenantId } from '../ids.ts';
import type { BackendProcess, ProcessSink, RecoveredProcess } from './process-types.ts';
import type { BackendSession } from './session-types.ts';

/** A session a backend kept: enough to rebuild the server's `Session` around it and adopt its processes. */
export interface RecoveredSession {
  readonly session: BackendSession;
  readonly tenant: TenantId;
  readonly labels: Readonly<Record<string, string>>;
  readonly createdAt: Date;
  /**
   * Optional, read after `adoptProcesses`: when (this server's clock) the session was last
   * noted used (`BackendSession.noteActivity`); undefined when the backend does not know.
   */
  notedAt?(): number | undefined;
  /** What `persistRecord` stored; undefined when the session died before it was stored. */
  readonly record?: string | undefined;
  /**
   * Optional: hands the engine every process the backend kept, one call each; `adopt` returns
   * the sink that process reports to from now on, or undefined to let it go (it is killed and
   * forgotten). Resolves with the number adopted. Backends whose processes die with the server
   * leave it out.
   */
  adoptProcesses?(adopt: (p: RecoveredProcess, process: BackendProcess) => ProcessSink | undefined): Promise<number>;
}
