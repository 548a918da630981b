/**
 * Which real path a file operation touches, and whether the session sandbox allows it.
 *
 * Paths are compared only once canonical (symlinks and `..` resolved by the backend's
 * `realpath`), and so are the policy's writable roots and deny-read paths: otherwise a link
 * could lead out of what the sandbox allows, or a root spelled through a link would match nothing.
 * The policy's deny-read paths are also kept as they resolved at the session's creation.
 */
import { posix } from 'node:path';
import type { FileMetadata, ResolvedSandbox, SessionFs } from '../../backends/types.ts';
import { execError, ExecServerError } from '../../errors.ts';
import {
  canRead,
  canWrite,
  containsDenied,
  resolveSandbox,
  sessionWorkspaces,
  type SandboxNarrowing,
} from '../../policy/sandbox-policy.ts';
import type { SessionCore } from '../session-view.ts';

/** How long canonical forms of the policy's roots and deny-read paths are reused. */
const ROOT_CACHE_MS = 5000;

/** Whether `err` is the backend's "no such file or directory". */
export const isNotFound = (err: unknown): boolean =>
  err instanceof ExecServerError && err.code === 'EXEC_ERR_NOT_FOUND';

/** The sandbox one operation is checked against: resolved from the session policy, paths canonical. */
export class Checker {
  readonly sandbox: ResolvedSandbox;
  readonly #policyName: string;

  constructor(sandbox: ResolvedSandbox, policyName: string) {
    this.sandbox = sandbox;
    this.#policyName = policyName;
  }

  /** Throws `EXEC_ERR_FS_DENIED` when `path` is on the deny-read list; `what` names the operation. */
  read(path: string, what = 'read'): void {
    if (!canRead(this.sandbox, path))
      throw execError('EXEC_ERR_FS_DENIED', `${path}: ${what} denied: the path is on the session's deny-read list`, {
        detail: { path },
      });
  }

  /** Like `read`, and also refuses a tree that holds a deny-read path anywhere below `path`. */
  readTree(path: string, what: string): void {
    this.read(path, what);
    if (containsDenied(this.sandbox, path))
      throw execError(
        'EXEC_ERR_FS_DENIED',
        `${path}: ${what} denied: the tree contains a path on the session's deny-read list`,
        { detail: { path } },
      );
  }

  /** Throws `EXEC_ERR_FS_DENIED` unless `path` lies inside a writable root (or the sandbox is unrestricted). */
  write(path: string): void {
    if (this.sandbox.kind === 'unrestricted' || canWrite(this.sandbox, path)) return;
    this.read(path, 'write');
    if (this.sandbox.writableRoots.length === 0)
      throw execError('EXEC_ERR_FS_DENIED', `${path}: write denied: the sandbox is read-only`, { detail: { path } });
    throw execError(
      'EXEC_ERR_FS_DENIED',
      `${path}: write denied: outside the writable roots of the ${this.#policyName} sandbox (${this.sandbox.writableRoots.join(', ')})`,
      { detail: { path } },
    );
  }
}

/** Canonical paths and checkers for the file operations of one session. */
export class SessionPaths {
  readonly #session: Pick<SessionCore, 'backend' | 'spec'>;
  /** Taken anew on every use, so that each step fails once the session is gone. */
  readonly #fs: () => SessionFs;
  readonly #canonical = new Map<string, { path: string; at: number }>();
  /**
   * The policy's deny-read paths where they resolved when the session was made. A command may
   * remove or re-point a link they are spelled through; what they denied then stays denied.
   */
  readonly #pinnedDenied: Promise<readonly string[]>;

  constructor(session: Pick<SessionCore, 'backend' | 'spec'>, fs: () => SessionFs) {
    this.#session = session;
    this.#fs = fs;
    // Started now, before the session can run a command; a session already gone has no paths to pin.
    const pin = (d: string): Promise<string> =>
      fs()
        .realpath(d)
        .catch(() => d);
    this.#pinnedDenied = Promise.resolve()
      .then(() => Promise.all(session.spec.policy.denyRead.map(pin)))
      .catch(() => []);
  }

  async #realpathCached(path: string): Promise<string> {
    const hit = this.#canonical.get(path);
    if (hit && Date.now() - hit.at < ROOT_CACHE_MS) return hit.path;
    const canonical = await this.#fs()
      .realpath(path)
      .catch(() => path);
    this.#canonical.set(path, { path: canonical, at: Date.now() });
    return canonical;
  }

  /**
   * The sandbox of one operation: the session policy, narrowed by the client's `narrowing`,
   * with writable roots and deny-read paths canonicalized like the paths they are compared with.
   */
  async checker(narrowing?: SandboxNarrowing): Promise<Checker> {
    const policy = this.#session.spec.policy;
    const resolved = resolveSandbox(policy, sessionWorkspaces(this.#session.backend), narrowing);
    if (resolved.kind === 'unrestricted') return new Checker(resolved, policy.sandbox.type);
    const roots = await Promise.all(resolved.writableRoots.map((r) => this.#realpathCached(r)));
    const denied = await Promise.all(resolved.denyRead.map((d) => this.#realpathCached(d)));
    const pinned = await this.#pinnedDenied;
    return new Checker(
      {
        ...resolved,
        writableRoots: [...new Set(roots)],
        denyRead: [...new Set([...resolved.denyRead.map((d) => posix.normalize(d)), ...denied, ...pinned])],
      },
      policy.sandbox.type,
    );
  }

  /** Where `path` itself lives: its parent canonicalized, its last component kept (a link stays a link). */
  async linkPath(path: string): Promise<string> {
    if (path === '/') return '/';
    return posix.join(await this.#fs().realpath(posix.dirname(path)), posix.basename(path));
  }

  /**
   * Canonical target of a write. `realpath` keeps a missing tail as spelled; when the first
   * existing component of that tail is a (dangling) symlink, writing there would follow it to
   * wherever it points, so that is refused.
   */
  async writeTarget(path: string): Promise<string> {
    const target = await this.#fs().realpath(path);
    for (let p = target; ; p = posix.dirname(p)) {
      let info: FileMetadata;
      try {
        info = await this.#fs().stat(p);
      } catch (err) {
        if (isNotFound(err) && p !== '/') continue;
        throw err;
      }
      if (info.isSymlink)
        throw execError('EXEC_ERR_FS_DENIED', `${p}: is a dangling symbolic link; refusing to write through it`, {
          detail: { path },
        });
      return target;
    }
  }
}
