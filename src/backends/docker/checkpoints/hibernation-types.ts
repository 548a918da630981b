/**
 * What a hibernatable session wraps and is made with (hibernation.ts): the docker session's own
 * surface plus what the gate needs of it.
 */
import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import type {
  BackendProcess,
  BackendSession,
  ProcessSink,
  RecoveredProcess,
  ResolvedSandbox,
  SessionStats,
} from '../../types.ts';
import type { TenantId } from '../../../ids.ts';
import type { AgentChannel } from '../agent/agent-channel.ts';
import type { DockerLogger } from '../options.ts';
import type { MemorySnapshots, restoredAdopter } from './memory-snapshot.ts';
import type { SnapshotQuota } from './snapshot-quota.ts';

/** The session being wrapped: the docker session's own surface plus what hibernation needs. */
export type InnerSession = BackendSession & {
  readonly tenant: TenantId;
  readonly container: Docker.Container;
  readonly lostReason: string | undefined;
  /** The exec agent on the agent path; its connection must not span a checkpoint. */
  readonly agent: AgentChannel | undefined;
  readonly execPathReason?: string | undefined;
  markLost(reason: string): void;
  enableEgress(port: number, accept: (conn: Duplex, offersSocket?: boolean) => void): Promise<void>;
  stats(): Promise<SessionStats>;
  prepareSandbox(sandbox: ResolvedSandbox): Promise<void>;
  containerRunning(): Promise<boolean | undefined>;
  killAll(): Promise<void>;
  recoverExecProcesses(
    adopt: (p: RecoveredProcess, process: BackendProcess) => ProcessSink | undefined,
  ): Promise<number>;
};

/** What a hibernatable session is made with: the session it wraps, its runtime and its schedule. */
export interface HibernationInit {
  readonly inner: InnerSession;
  readonly runtime: string;
  /** Why this runtime cannot checkpoint here, or undefined. */
  readonly unsupportedReason: string | undefined;
  readonly timeoutMs: number;
  readonly log: DockerLogger;
  /** Re-adopted while hibernated (server restart): since when, and the checkpoint to wake from. */
  readonly hibernated?: { readonly at: Date; readonly checkpoint: string } | undefined;
  /** Restored from a memory snapshot: the agent's processes are handed over once (`adoptRestored`). */
  readonly restored?: Parameters<typeof restoredAdopter>[0];
  /** Where memory snapshots go; undefined: none are taken. */
  readonly memory?: MemorySnapshots | undefined;
  /** The tenant's snapshot quota, which every snapshot passes; undefined: none. */
  readonly quota?: SnapshotQuota | undefined;
}
