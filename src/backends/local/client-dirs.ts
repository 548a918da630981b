/**
 * The client's directories a local session must show at their own paths.
 *
 * On the local backend paths are host paths, but a sandboxed command sees a private /tmp, and the
 * session's fs calls map `/tmp/...` onto it too. A client whose working directory lies under the
 * host's /tmp (agent harnesses make theirs with mkdtemp) then wrote a file through the file API
 * that its next command could not see. A directory registered here is the host's in both views:
 * bound at its own path over the private /tmp in every sandbox of the session (bubblewrap.ts), and
 * left unmapped by the fs calls (sandboxed-fs.ts).
 *
 * The client's working directory (`environmentConfig/read`, which Codex sends first) is also a
 * workspace of the session: a writable root wherever the policy makes the workspace one, lent to
 * the sandbox user like the session's own, so a Codex client works in its directory wherever it
 * is, as with the reference server; for a confined tenant, wherever `--local-host-dirs` lets it
 * (host-dirs.ts). A command's cwd under /tmp is only made visible (/tmp's own
 * policy decides whether it is writable).
 */
import { stat } from 'node:fs/promises';
import { posix } from 'node:path';
import { withinHostDirs } from './host-dirs.ts';
import { lendable } from './workspace-users.ts';
import { isWithin } from '../../path-within.ts';

/** Client directories per session, at most (every one is a bind in each of its sandboxes). */
const MAX_CLIENT_DIRS = 16;

/** A session's client directories under /tmp, shown at their own host paths in its sandboxes and fs calls. */
export class ClientDirectories {
  readonly #excluded: readonly string[];
  readonly #hostDirs: readonly string[] | undefined;
  readonly #all = new Set<string>();
  readonly #workspaces: string[] = [];

  /**
   * `excluded`: where the server keeps sessions' own directories (never a client's); `hostDirs`:
   * where a confined tenant's client directories must lie (host-dirs.ts; undefined: anywhere).
   */
  constructor(excluded: readonly string[], hostDirs?: readonly string[]) {
    this.#excluded = excluded.map((p) => posix.normalize(p));
    this.#hostDirs = hostDirs;
  }

  /** The client's working directories that are workspaces of the session. */
  get workspaces(): readonly string[] {
    return this.#workspaces;
  }

  /** Every registered directory (workspaces and command directories). */
  get all(): readonly string[] {
    return [...this.#all];
  }

  /** Whether `path` lies in a registered directory. */
  covers(path: string): boolean {
    for (const dir of this.#all) if (isWithin(path, dir)) return true;
    return false;
  }

  /**
   * Registers `path` if it is an existing directory of the host that is not the server's own (and
   * lies in the tenant's host directories); `workspace`: as a workspace of the session (not a
   * system directory). Anything else is ignored.
   */
  async add(path: string, workspace: boolean): Promise<void> {
    if (!posix.isAbsolute(path)) return;
    const dir = posix.normalize(path);
    if (workspace ? this.#workspaces.includes(dir) : this.#all.has(dir) || !isWithin(dir, '/tmp')) return;
    if (dir === '/tmp' || this.#all.size >= MAX_CLIENT_DIRS) return;
    if (this.#excluded.some((e) => isWithin(dir, e) || isWithin(e, dir))) return;
    if (workspace && !lendable(dir)) return;
    if (!(await withinHostDirs(dir, this.#hostDirs))) return;
    if (!(await stat(dir).catch(() => undefined))?.isDirectory()) return;
    if (workspace && !this.#workspaces.includes(dir)) this.#workspaces.push(dir);
    this.#all.add(dir);
  }
}
