/**
 * What a backend hands back of sessions it kept across a server restart or a fleet take-over
 * (`Backend.recover`, `FleetBackend.takeOver`): the sessions and the processes still in them.
 */
import type { TenantId } from '../ids.ts';
import type { StreamName } from '../protocol/index.ts';
import type { BackendProcess, BackendSession, ProcessSink, SandboxType } from './types.ts';

/** A process a recovered session still has (its backend kept it running, or its exit). */
export interface RecoveredProcess {
  /** What `SpawnRequest.recoveryTag` carried. */
  readonly tag: string;
  /**
   * Output the backend kept, oldest first. `seq`: the log event the previous server published
   * the chunk as (`BackendProcess.acknowledge`); absent for output it never published.
   */
  readonly chunks: ReadonlyArray<{
    readonly stream: StreamName;
    readonly data: Buffer;
    readonly seq?: number | undefined;
  }>;
  /** Output dropped before the first chunk (past the backend's retention). */
  readonly droppedBytes: number;
  /** Offset after the last chunk, counted like `acknowledge`'s. */
  readonly endOffset: number;
  /** The sandbox mechanism the attempt ran under. */
  readonly sandboxType: SandboxType;
  /**
   * True when the backend kept no record of what the previous server published (docker's exec
   * path): the seqs it numbered are unknown, so the next ones must lie past any it could have used.
   */
  readonly seqsUnknown?: boolean | undefined;
}

export interface RecoveredSession {
  readonly session: BackendSession;
  readonly tenant: TenantId;
  readonly labels: Readonly<Record<string, string>>;
  readonly createdAt: Date;
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
