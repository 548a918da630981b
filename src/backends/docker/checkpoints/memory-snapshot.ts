/**
 * Memory snapshots (live templates; a fork is one plus its sessions, docs/snapshots.md): the
 * session container is checkpointed, its filesystem committed while it is stopped (so files and
 * memory are of one instant), and it is restored at once; the checkpoint goes to the server's
 * store (checkpoint-store.ts) under the snapshot's id. A session made from the snapshot is
 * restored from it (session-factory.ts), its processes running.
 */
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import type { BackendSession, SessionStats, SnapshotInfo, SnapshotOptions } from '../../types.ts';
import type { AckMarks, AgentChannel } from '../agent/agent-channel.ts';
import type { DockerLogger } from '../options.ts';
import type { CheckpointStore, Leftover } from './checkpoint-store.ts';
import { checkpointUnsupportedReason, type EngineRuntimes } from '../engine/runtimes.ts';
import { clearAfterRestore, renewHostname, restoreContainer } from './checkpoint-restore.ts';

/** What a memory snapshot uses of the session it checkpoints (hibernation.ts's HibernatableSession). */
export interface CheckpointableSession {
  readonly id: string;
  readonly runtime: string;
  /** Why this runtime cannot checkpoint here, or undefined. */
  readonly unsupportedReason: string | undefined;
  readonly inner: {
    readonly container: Docker.Container;
    stats(): Promise<SessionStats>;
    snapshot(name: string | undefined, options?: SnapshotOptions): Promise<SnapshotInfo>;
    /** The exec agent: the marks it never read go with the checkpoint. */
    readonly agent: Pick<AgentChannel, 'unsentMarks'> | undefined;
  };
  /** Runs `fn` with the session checkpointed (stopped for its length); the pause is measured. */
  whileCheckpointed<T>(fn: (checkpoint: string) => Promise<T>): Promise<{ value: T; pauseMs: number }>;
}

const MiB = 1024 * 1024;

/** What memory snapshots use: the checkpoint store and the largest memory one may hold. */
export interface MemorySnapshots {
  readonly store: CheckpointStore;
  /** The most memory a session may use to be snapshotted with it, and the most its checkpoint may take. */
  readonly maxBytes: number;
  /** Removes a snapshot image again (a checkpoint that could not be kept). */
  readonly removeImage: (snapshotId: string) => Promise<void>;
  /** A live template was made (template pools look theirs up again). */
  readonly taken?: (() => void) | undefined;
  readonly log: DockerLogger;
}

/** Why a session cannot have its memory snapshotted now, before anything is stopped. */
async function refusal(m: MemorySnapshots, session: CheckpointableSession): Promise<void> {
  if (session.unsupportedReason !== undefined)
    throw execError(
      'EXEC_ERR_UNSUPPORTED',
      `cannot snapshot or fork a session with its memory on the runtime ${session.runtime}: ${session.unsupportedReason}; a filesystem snapshot or fork (without memory) works`,
      { detail: { runtime: session.runtime } },
    );
  const stats = await session.inner.stats().catch(() => undefined);
  if (stats !== undefined && stats.memoryBytes > m.maxBytes)
    throw tooLarge(`the session uses ${Math.ceil(stats.memoryBytes / MiB)} MiB of memory`, m.maxBytes);
  await m.store.check();
}

function tooLarge(what: string, maxBytes: number): Error {
  return execError(
    'EXEC_ERR_TOO_LARGE',
    `cannot snapshot the session with its memory: ${what}, above the ${Math.floor(maxBytes / MiB)} MiB a memory checkpoint may hold (--checkpoint-max-mb)`,
    { detail: { maxBytes } },
  );
}

/** Checkpoints, commits and restores `session`; the snapshot's memory is in the store. */
export async function takeMemorySnapshot(
  m: MemorySnapshots | undefined,
  session: CheckpointableSession,
  name: string | undefined,
): Promise<SnapshotInfo> {
  if (m === undefined) throw execError('EXEC_ERR_UNSUPPORTED', 'memory snapshots are off on this server');
  await refusal(m, session);
  const inspect = await session.inner.container.inspect().catch(() => undefined);
  const network = inspect === undefined ? undefined : inspect.HostConfig.NetworkMode !== 'none';
  const { value, pauseMs } = await session.whileCheckpointed(async (checkpoint) => {
    const t0 = Date.now();
    const info = await session.inner.snapshot(name, { memory: true });
    try {
      const t1 = Date.now();
      // Output the source published after its agent stopped reading: its forks keep those seqs.
      const marks = session.inner.agent?.unsentMarks();
      const bytes = await m.store.keep(session.inner.container.id, checkpoint, info.snapshotId, { marks, network });
      m.log.debug({ sessionId: session.id, commitMs: t1 - t0, keepMs: Date.now() - t1, bytes }, 'memory snapshot kept');
      if (bytes > m.maxBytes) throw tooLarge(`its checkpoint takes ${Math.ceil(bytes / MiB)} MiB`, m.maxBytes);
      return { ...info, memory: true, checkpointBytes: bytes };
    } catch (err) {
      await discard(m, session.id, info.snapshotId, err);
      throw err;
    }
  });
  m.taken?.();
  return { ...value, pauseMs };
}

/**
 * Removes the checkpoint and the image of a memory snapshot that failed (`failure`, what the
 * client is answered). Nothing else would remove them: no sweep of the store or of snapshot
 * images runs (a replica cannot tell another's from a leftover), and the client never got the
 * id. So what is left is logged with the ids and counted
 * (`exec_server_snapshot_cleanup_failures_total`) for the operator to remove.
 */
async function discard(m: MemorySnapshots, sessionId: string, snapshotId: string, failure: unknown): Promise<void> {
  const warn = (leftover: Leftover, err: unknown): void => {
    m.store.cleanupFailed(leftover);
    m.log.warn(
      { sessionId, snapshotId, leftover, err: (err as Error).message, failure: (failure as Error).message },
      `memory snapshot failed and its ${leftover} could not be removed`,
    );
  };
  const checkpoint = await m.store.remove(snapshotId).then(
    () => ({ removed: true as const }),
    (err: unknown) => ({ removed: false as const, err }),
  );
  await m.removeImage(snapshotId).catch((err: unknown) => warn('image', err));
  // Asked of the store after both: removing the image may remove the checkpoint too (the
  // backend's deletion of a snapshot does).
  if (!checkpoint.removed && (await m.store.has(snapshotId).catch(() => true))) warn('checkpoint', checkpoint.err);
}

/** A container restored from a live template, and the source's marks for its processes. */
export type TemplateRestore = ((container: Docker.Container) => Promise<void>) & {
  readonly marks: () => Promise<AckMarks | undefined>;
};

/** `adoptRestored` of a session restored from a live template (`restored`: its `TemplateRestore`). */
export function restoredAdopter(
  restored: boolean | Pick<TemplateRestore, 'marks'> | undefined,
  agent: AgentChannel | undefined,
): BackendSession['adoptRestored'] {
  if (restored === undefined || restored === false || agent === undefined) return undefined;
  return async (adopt) =>
    agent.recover(adopt, restored === true ? undefined : await restored.marks().catch(() => undefined));
}

/**
 * How a session made from a live template starts (provision.ts `restore`): its container is
 * restored from a copy of the template's checkpoint, then gets a hostname of its own.
 */
export function templateRestorer(o: {
  readonly store: CheckpointStore;
  readonly engine: EngineRuntimes;
  readonly runtime: string;
  readonly snapshotId: string;
  readonly sessionId: string;
  readonly timeoutMs: number;
  readonly log: DockerLogger;
}): TemplateRestore {
  const reason = checkpointUnsupportedReason(o.engine, o.runtime);
  if (reason !== undefined)
    throw execError(
      'EXEC_ERR_UNSUPPORTED',
      `snapshot ${o.snapshotId} holds memory, which the runtime ${o.runtime} cannot restore (${reason}): ask for a gVisor runtime (session.runtime)`,
      { detail: { runtime: o.runtime } },
    );
  const restore = async (container: Docker.Container): Promise<void> => {
    const t0 = Date.now();
    const checkpoint = await o.store.install(o.snapshotId, container.id);
    const t1 = Date.now();
    await restoreContainer(container, checkpoint, o.log, o.sessionId);
    const t2 = Date.now();
    await clearAfterRestore(container, o.timeoutMs, o.log, o.sessionId);
    await renewHostname(container, o.timeoutMs, o.log);
    const timings = { installMs: t1 - t0, restoreMs: t2 - t1, clearMs: Date.now() - t2 };
    o.log.debug({ sessionId: o.sessionId, ...timings }, 'restored from a live template');
  };
  return Object.assign(restore, { marks: async () => (await o.store.meta(o.snapshotId)).marks });
}
