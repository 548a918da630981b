/**
 * Ending every process of a session container but its init, keep-alive loop and exec agent
 * (`session/terminateAll`, the disk watch): one engine exec as root running KILL_ALL_SCRIPT,
 * tried again while it cannot start. Under a fork bomb the container may have no process slot
 * for the exec until one frees; the script itself forks nothing (docs/docker-backend.md,
 * "Ending every process").
 */
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import { AGENT_PATH } from '../agent/agent-connection.ts';
import { runControl } from './exec-runner.ts';
import type { DockerLogger } from '../options.ts';
import { KILL_ALL_SCRIPT } from './scripts.ts';

/** How long the exec is tried again (a fork bomb may hold every process slot meanwhile). */
const KILL_ALL_DEADLINE_MS = 15_000;
/**
 * Process slots added to the container's pids limit while the exec cannot start. A fork bomb
 * takes each slot that frees before the engine's exec can (measured: 1 exec start in 44 tries
 * over 15 s against a bomb at a limit of 64), so the exec gets room the bomb needs time to fill;
 * the limit is put back as soon as the exec ran, or failed for good.
 */
export const KILL_ALL_PIDS_HEADROOM = 1024;

/** Which container to clear, and whether its agent is to be spared. */
export interface KillAllOptions {
  readonly container: Docker.Container;
  /** Whether the session has an exec agent (its processes are spared). */
  readonly agent: boolean;
  readonly timeoutMs: number;
  readonly log: DockerLogger;
  /** False once the session is lost or being destroyed: nothing left to end. */
  readonly wanted: () => boolean;
}

/** Ends every process of a session container but its init, keep-alive loop and agent. */
export async function killAllProcesses(o: KillAllOptions): Promise<void> {
  let restore: (() => Promise<void>) | undefined;
  try {
    await killAllTries(o, async () => {
      restore ??= await widenPidsLimit(o);
    });
  } finally {
    await restore?.();
  }
}

/**
 * Raises the container's pids limit by KILL_ALL_PIDS_HEADROOM; answers how to put it back.
 * Nothing to do for a container without a limit. Best effort: a failure leaves the retries.
 */
async function widenPidsLimit(o: KillAllOptions): Promise<() => Promise<void>> {
  const none = async (): Promise<void> => undefined;
  try {
    const limit = (await o.container.inspect()).HostConfig?.PidsLimit;
    if (limit === undefined || limit === null || limit <= 0) return none;
    await o.container.update({ PidsLimit: limit + KILL_ALL_PIDS_HEADROOM });
    o.log.debug({ containerId: o.container.id, limit }, 'pids limit widened to end every process');
    return async () => {
      await o.container.update({ PidsLimit: limit }).catch((err: unknown) => {
        o.log.warn({ containerId: o.container.id, limit, err }, 'pids limit not put back after ending every process');
      });
    };
  } catch {
    return none;
  }
}

async function killAllTries(o: KillAllOptions, widen: () => Promise<void>): Promise<void> {
  const deadline = Date.now() + KILL_ALL_DEADLINE_MS;
  let last = '';
  for (let attempt = 1; o.wanted(); attempt++) {
    try {
      const result = await runControl(o.container, {
        cmd: ['/bin/sh', '-c', KILL_ALL_SCRIPT, 'sh', o.agent ? AGENT_PATH : ''],
        timeoutMs: o.timeoutMs,
      });
      if (result.exitCode === 0) {
        o.log.debug(
          { containerId: o.container.id, attempt, passes: result.stdout.toString().trim() },
          'ended every process',
        );
        return;
      }
      last = `exit ${result.exitCode}: ${result.stderr.trim()}`;
    } catch (err) {
      last = (err as Error).message;
    }
    if (Date.now() >= deadline)
      throw execError('EXEC_ERR_BACKEND', `cannot end every process of the session container: ${last}`);
    // The exec did not start or did not finish: most likely no process slot was free.
    await widen();
    await new Promise((r) => setTimeout(r, Math.min(50 * attempt, 500)));
  }
}

/** How long ending everything waits for the session's own control commands to finish. */
const CONTROL_DRAIN_MS = 10_000;

/**
 * Keeps the session's own short control commands (sandbox layout, record, aliases, file
 * metadata) out of `killAllProcesses`: it waits for those running (each bounded by its own
 * deadline, at most CONTROL_DRAIN_MS in all) and holds new ones until it is done. Streamed file
 * reads and writes do not pass here: one open at that moment is ended with the rest.
 */
export class ControlGate {
  #running = 0;
  #idle: (() => void) | undefined;
  #killing: Promise<void> | undefined;

  async run<T>(fn: () => Promise<T>): Promise<T> {
    while (this.#killing !== undefined) await this.#killing.catch(() => undefined);
    this.#running++;
    try {
      return await fn();
    } finally {
      this.#running--;
      if (this.#running === 0) this.#idle?.();
    }
  }

  /** Runs `kill` once the control commands running have finished; a call meanwhile joins it. */
  exclusive(kill: () => Promise<void>): Promise<void> {
    this.#killing ??= (async () => {
      if (this.#running > 0)
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, CONTROL_DRAIN_MS);
          this.#idle = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      this.#idle = undefined;
      await kill();
    })().finally(() => {
      this.#killing = undefined;
    });
    return this.#killing;
  }
}
