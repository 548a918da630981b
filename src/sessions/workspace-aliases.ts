/**
 * Client paths that stand for a session's workspace (docs/protocol.md, "Working directories").
 * Codex sends its own local working directory; on the docker backend a path that does not exist
 * in the container becomes an alias of the workspace, and the container gets a symlink there
 * (`BackendSession.aliasPath`), so `cd`, `pwd` and absolute paths under the client's directory
 * all reach the workspace. The local backend runs on the client's own filesystem view: paths
 * stay as they are.
 */
import type { BackendSession } from '../backends/types.ts';
import type { Logger } from '../logger.ts';

/** Client working directories a session maps onto its workspace, at most. */
const MAX_WORKSPACE_ALIASES = 16;

/** What the aliases use of the backend session. */
type AliasBackend = Pick<BackendSession, 'workdir' | 'containerId' | 'fs' | 'aliasPath' | 'clientDirectory'>;

/** One session's workspace aliases. */
export class WorkspaceAliases {
  /** Client paths that stand for the workspace (longest first is not needed: aliases never nest). */
  readonly #paths: string[] = [];
  /** Aliases that also exist as a symlink to the workspace inside the session. */
  readonly #linked = new Set<string>();
  /** Alias creations in flight, by path (concurrent starts in one new cwd make one alias). */
  readonly #making = new Map<string, Promise<string>>();
  readonly #backend: AliasBackend;
  readonly #log: Logger;

  constructor(backend: AliasBackend, log: Logger) {
    this.#backend = backend;
    this.#log = log;
  }

  get paths(): readonly string[] {
    return this.#paths;
  }

  /** Where a path the client names lives in this session. */
  map(path: string): string {
    for (const alias of this.#paths) {
      if (path === alias) return this.#backend.workdir;
      if (path.startsWith(`${alias}/`)) return `${this.#backend.workdir}${path.slice(alias.length)}`;
    }
    return path;
  }

  /** Whether commands started in `cwd` run in a linked alias of the workspace. */
  isLinked(cwd: string): boolean {
    const alias = this.#aliasOf(cwd);
    return alias !== undefined && this.#linked.has(alias);
  }

  /**
   * Maps a working directory the client names (a start's `cwd`, `environmentConfig/read`'s
   * `cwd`): a linked alias is used as it is (the link resolves it); without a link the
   * workspace path is used.
   */
  async resolveCwd(path: string): Promise<string> {
    const alias = this.#aliasOf(path);
    if (alias !== undefined) return this.#linked.has(alias) ? path : this.map(path);
    if (this.#backend.containerId === undefined) {
      await this.#backend.clientDirectory?.(path, false);
      return path;
    }
    let pending = this.#making.get(path);
    if (pending === undefined) {
      pending = this.#make(path);
      this.#making.set(path, pending);
      const done = (): void => void this.#making.delete(path);
      pending.then(done, done);
    }
    return pending;
  }

  /** Whether `path` is an alias of the workspace, or lies under one. */
  #aliasOf(path: string): string | undefined {
    return this.#paths.find((alias) => path === alias || path.startsWith(`${alias}/`));
  }

  async #make(path: string): Promise<string> {
    const exists = await this.#backend.fs.stat(path).then(
      () => true,
      () => false,
    );
    // A missing directory inside the workspace is a mistake to report (the start fails on its
    // cwd), not a client directory to map; and aliases are bounded per session.
    const workdir = this.#backend.workdir;
    if (exists || path === workdir || path.startsWith(`${workdir}/`) || this.#paths.length >= MAX_WORKSPACE_ALIASES)
      return path;
    // Another start may have made an alias above this path meanwhile.
    if (this.#aliasOf(path) !== undefined) return this.resolveCwd(path);
    this.#paths.push(path);
    const linked = (await this.#backend.aliasPath?.(path).catch(() => false)) ?? false;
    if (linked) this.#linked.add(path);
    this.#log.info({ alias: path, workdir, linked }, 'client working directory mapped onto the session workspace');
    return linked ? path : workdir;
  }
}
