/**
 * The mechanics of a memory checkpoint of a session container and of its restore, shared by
 * hibernation (hibernation.ts: checkpoint, stop, later restore into the same container) and by
 * live templates and forks (the checkpoint is kept and restored into new containers; see
 * checkpoint-store.ts). docs/docker-backend.md, "Hibernation"; docs/snapshots.md.
 *
 * gVisor cannot restore a checkpoint taken while an attached exec is open (its restore of the
 * memory mappings panics): the agent's connection, the only attached exec on the agent path, is
 * let go before the checkpoint and attached again after the restore.
 */
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import { withDeadline } from '../engine/engine-client.ts';
import { runControl } from '../exec/exec-runner.ts';
import type { AgentChannel } from '../agent/agent-channel.ts';
import type { DockerLogger } from '../options.ts';
import { RECORD_FILE } from '../exec/scripts.ts';
import { type CheckpointApi, deleteCheckpoints, HIBERNATION_FILE } from './checkpoints.ts';

/** Checkpoint and restore of a large container take seconds; a dead engine still fails at once. */
export const CHECKPOINT_TIMEOUT_MS = 120_000;

/** How long the engine may take to record the stop after a checkpoint answered. */
const STOP_WAIT_MS = 15_000;

/** Writes the hibernation file (see `HIBERNATION_FILE`). Args: file, record file, shell, exec path. */
const SAVE_SCRIPT =
  'umask 077 && mkdir -p "$(dirname "$1")" && { printf "%s\\n%s\\n" "$3" "$4"; cat "$2" 2>/dev/null || :; } >"$1.tmp" && mv "$1.tmp" "$1"';

/** What the mechanics need of the session container. */
export interface CheckpointTarget {
  readonly id: string;
  readonly container: Docker.Container;
  readonly agent: AgentChannel | undefined;
  readonly shellPath: string;
  containerRunning(): Promise<boolean | undefined>;
  readonly log: Pick<DockerLogger, 'warn'>;
}

/**
 * Keeps the facts a restarted server needs (`HIBERNATION_FILE`), drops older checkpoints, lets
 * the agent's connection go, then checkpoints the container as `name` and waits until the
 * engine has recorded its stop. The container is stopped when this resolves, with the time its
 * processes were frozen (the checkpoint call's start).
 */
export async function checkpointContainer(t: CheckpointTarget, name: string, timeoutMs: number): Promise<number> {
  const saved = await runControl(t.container, {
    cmd: [
      '/bin/sh',
      '-c',
      SAVE_SCRIPT,
      'sh',
      HIBERNATION_FILE,
      RECORD_FILE,
      t.shellPath,
      t.agent === undefined ? 'exec' : `agent ${t.agent.attachedProcesses}`,
    ],
    timeoutMs,
  });
  if (saved.exitCode !== 0)
    throw execError('EXEC_ERR_BACKEND', `cannot checkpoint: saving the session facts failed: ${saved.stderr.trim()}`);
  // Checkpoints of earlier hibernations (a wake that could not delete its own) go first. One
  // left is no reason to refuse: it goes with the container, but takes the engine's disk till then.
  await deleteCheckpoints(t.container, timeoutMs).catch((err: unknown) =>
    t.log.warn({ sessionId: t.id, err: (err as Error).message }, 'earlier checkpoints not deleted before a checkpoint'),
  );
  // Last: the agent's connection (an attached exec) goes; its processes stay with the agent.
  await t.agent?.detach();
  const frozenAt = Date.now();
  await withDeadline('container checkpoint', CHECKPOINT_TIMEOUT_MS, (abortSignal) =>
    (t.container as unknown as CheckpointApi).createCheckpoint({ CheckpointID: name, Exit: true, abortSignal }),
  );
  // The engine answers before it has recorded the stop; a restore before that is refused.
  const deadline = Date.now() + STOP_WAIT_MS;
  while ((await t.containerRunning()) !== false) {
    if (Date.now() >= deadline)
      throw execError(
        'EXEC_ERR_BACKEND',
        `cannot checkpoint: the checkpoint was taken but the container still runs after ${STOP_WAIT_MS} ms`,
      );
    await new Promise((r) => setTimeout(r, 50));
  }
  return frozenAt;
}

/**
 * Starts `container` from its checkpoint `checkpoint`. The engine refuses a start with a body:
 * the checkpoint goes in the query only. Two failures pass, so a few tries, bounded: right after
 * a checkpoint the runtime may still hold the sandbox's id; and a restore whose sandbox failed
 * to resume is retried by the engine, whose second upload of the checkpoint then meets the
 * first one in containerd ("... already exists") until the failed start has removed it.
 */
export async function restoreContainer(
  container: Docker.Container,
  checkpoint: string,
  log: DockerLogger,
  sessionId: string,
): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await withDeadline('container restore', CHECKPOINT_TIMEOUT_MS, (abortSignal) =>
        container.start({ _query: { checkpoint }, _body: {}, abortSignal } as object),
      );
      return;
    } catch (err) {
      const message = (err as Error).message;
      const idInUse = /id already in use/.test(message);
      if (!idInUse && !/upload checkpoint to containerd: .*already exists/.test(message)) throw err;
      if (attempt >= 5) {
        if (!idInUse) throw err;
        throw execError(
          'EXEC_ERR_BACKEND',
          `${message}: the runtime kept the container's id after its checkpoint (runsc 2022-12 does so for a container that was itself restored; register it through scripts/runsc-runtime.sh, docs/docker-backend.md)`,
          { cause: err },
        );
      }
      log.debug({ sessionId, attempt, err: message }, 'restore refused; trying again');
      await new Promise((r) => setTimeout(r, 500 * attempt));
    }
  }
}

/** After a restore: the container's checkpoints and the hibernation file go (snapshots never hold them). */
export async function clearAfterRestore(
  container: Docker.Container,
  timeoutMs: number,
  log: DockerLogger,
  sessionId: string,
): Promise<void> {
  await deleteCheckpoints(container, timeoutMs).catch((err: unknown) =>
    log.warn({ sessionId, err: (err as Error).message }, 'checkpoint not deleted after restore'),
  );
  const facts = HIBERNATION_FILE.slice(0, HIBERNATION_FILE.lastIndexOf('/'));
  const removed = await runControl(container, { cmd: ['rm', '-rf', '--', facts], timeoutMs }).catch((err: unknown) => ({
    exitCode: -1,
    stderr: (err as Error).message,
  }));
  // Left behind, the session's snapshots would hold it (its record of commands, root-only).
  if (removed.exitCode !== 0)
    log.warn({ sessionId, err: removed.stderr.trim() }, 'hibernation file not removed after restore');
}

/**
 * A container restored from another's checkpoint keeps that one's hostname (the kernel state is
 * restored): it gets the name the engine gives every container, its short id. The session's
 * own commands cannot (no CAP_SYS_ADMIN); this one exec of the server's gets the capability.
 */
export async function renewHostname(container: Docker.Container, timeoutMs: number, log: DockerLogger): Promise<void> {
  const r = await runControl(container, {
    cmd: ['hostname', container.id.slice(0, 12)],
    privileged: true,
    timeoutMs,
  }).catch((err: unknown) => ({ exitCode: -1, stderr: (err as Error).message }));
  if (r.exitCode !== 0)
    log.warn({ containerId: container.id, err: r.stderr.trim() }, 'hostname not renewed after restore');
}
