/**
 * The container-user sandbox's layout in a session's container: which roots the sandbox user
 * owns, which shared tmp dirs are open to it, which paths it cannot read (PREPARE_SANDBOX_SCRIPT).
 * Applied by a control command before a restricted command runs, and only again after a change.
 */
import { execError } from '../../../errors.ts';
import type { ResolvedSandbox } from '../../types.ts';
import type { ControlRunner } from './control-runner.ts';
import { PREPARE_SANDBOX_SCRIPT, SHARED_TMP_DIRS } from './scripts.ts';

/** What the layout uses of its session. */
export interface SandboxLayoutDeps {
  /** Control commands of the session (through the agent when there is one). */
  readonly runner: Pick<ControlRunner, 'run'>;
  /** `uid:gid` of the sandbox user. */
  readonly sandboxUser: string;
  readonly timeoutMs: number;
}

/** One session's sandbox layout, applied at most once per change. */
export class SandboxLayout {
  readonly #deps: SandboxLayoutDeps;
  /** Key of the sandbox layout last applied, and whether root changed files since. */
  #preparedKey: string | undefined;
  #dirty = true;
  #ownedRoots = new Set<string>();
  #prepareChain: Promise<void> = Promise.resolve();

  constructor(deps: SandboxLayoutDeps) {
    this.#deps = deps;
  }

  /** Root may have changed files the sandbox user must own: the next `prepareSandbox` applies again. */
  markDirty(): void {
    this.#dirty = true;
  }

  /**
   * Makes the container match `sandbox` for the sandbox user: writable roots owned by it,
   * shared tmp dirs open only when inside a writable root, deny-read paths closed. Skipped
   * when the same layout was applied and root changed nothing since. Serialized.
   */
  prepareSandbox(sandbox: Extract<ResolvedSandbox, { kind: 'restricted' }>): Promise<void> {
    const roots = [...new Set(sandbox.writableRoots)].sort();
    const deny = [...new Set(sandbox.denyRead)].sort();
    const key = JSON.stringify([roots, deny]);
    const run = async (): Promise<void> => {
      if (!this.#dirty && this.#preparedKey === key) return;
      const covered = (d: string): boolean => roots.some((r) => d === r || d.startsWith(r.endsWith('/') ? r : `${r}/`));
      const lock = SHARED_TMP_DIRS.filter((d) => !covered(d));
      const unlock = SHARED_TMP_DIRS.filter((d) => covered(d));
      // Roots the sandbox user owned under an earlier layout: back to root, or they stay writable.
      const revoked = [...this.#ownedRoots].filter((r) => !covered(r));
      this.#dirty = false;
      const result = await this.#deps.runner.run({
        cmd: [
          '/bin/sh',
          '-c',
          PREPARE_SANDBOX_SCRIPT,
          'sh',
          this.#deps.sandboxUser,
          ...roots,
          '--',
          ...revoked,
          '--',
          ...lock,
          '--',
          ...unlock,
          '--',
          ...deny,
        ],
        timeoutMs: this.#deps.timeoutMs,
      });
      if (result.exitCode !== 0) {
        this.#dirty = true;
        throw execError('EXEC_ERR_BACKEND', `cannot prepare the container-user sandbox: ${result.stderr.trim()}`);
      }
      this.#preparedKey = key;
      this.#ownedRoots = new Set(roots);
    };
    const next = this.#prepareChain.then(run, run);
    this.#prepareChain = next.catch(() => undefined);
    return next;
  }
}
