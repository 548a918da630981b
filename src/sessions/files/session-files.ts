/**
 * Sandbox-checked file operations on a session: what `fs/*` (JSON-RPC) and
 * `/v1/sessions/:id/files` (HTTP) both go through.
 *
 * Every path is taken from the client (absolute path or `file://` URI), mapped onto the session
 * (`mapClientPath`), canonicalized with the backend's `realpath` (symlinks and `..` resolved, so a
 * link cannot lead out of what the sandbox allows) and only then checked:
 * - reads (read, list, copy source, metadata, canonicalize) must not touch a deny-read path;
 * - writes (write, mkdir, remove, copy destination) must land inside a writable root
 *   (`workspace-write`), never anywhere under `read-only`, anywhere under `danger-full-access`;
 * - the Codex per-call `sandbox` parameter narrows the session policy, it can never widen it.
 * The backend operation then runs on the canonical path, not on the client's spelling.
 *
 * The checks live in `path-checker.ts`, chunked read and write handles in `file-handles.ts`,
 * `fs/watchMissing` watches in `missing-watches.ts`; this facade ties them to the session.
 */
import { posix } from 'node:path';
import { notRegularFile } from '../../backends/fs-errors.ts';
import type { FileMetadata, SessionFs } from '../../backends/types.ts';
import { execError } from '../../errors.ts';
import { containsDenied, type SandboxNarrowing } from '../../policy/sandbox-policy.ts';
import type { FilesSession } from '../session-view.ts';
import { toFieldPath, toPath } from '../../protocol/index.ts';
import { FileHandles } from './file-handles.ts';
import type { FileLimits } from './file-limits.ts';
import { guardedWrite } from './guarded-write.ts';
import { MissingWatches, type WatchNotifier } from './missing-watches.ts';
import { isNotFound, SessionPaths, type Checker } from './path-checker.ts';

export { DEFAULT_FILE_LIMITS } from './file-limits.ts';
export type { FileLimits } from './file-limits.ts';
export type { WatchNotifier } from './missing-watches.ts';

/** The file operations of one session, each checked against its sandbox (the session owns one: `Session.files`). */
export class SessionFiles {
  readonly session: FilesSession;
  readonly limits: FileLimits;
  readonly #paths: SessionPaths;
  /** The path of each open write handle, for its audit line when it closes. */
  readonly #writeTargets = new Map<string, string>();
  readonly #handles: FileHandles;
  readonly #watches: MissingWatches;
  #closed = false;

  /** Made by the session itself, with the limits of the server's configuration; closed by its `destroy()`. */
  constructor(session: FilesSession, limits: FileLimits) {
    this.session = session;
    this.limits = limits;
    const fs = (): SessionFs => this.#fs;
    this.#paths = new SessionPaths(session, fs);
    this.#handles = new FileHandles(limits, fs);
    this.#watches = new MissingWatches(session, limits);
  }

  get #fs(): SessionFs {
    if (this.#closed) throw execError('EXEC_ERR_SESSION_DEAD', 'session was deleted');
    this.session.assertAlive();
    return this.session.backend.fs;
  }

  /** A client path (absolute or `file://`) as an absolute, normalized path inside the session. */
  resolvePath(raw: string, field = 'path'): string {
    const path = toFieldPath(raw, field);
    if (!posix.isAbsolute(path))
      throw execError(
        'EXEC_ERR_INVALID_PARAMS',
        `${field}: ${JSON.stringify(raw)} is not absolute; send an absolute path or a file:// URI`,
        { detail: { field } },
      );
    return posix.normalize(this.session.mapClientPath(posix.normalize(path)));
  }

  /** The path as the client spells it: a workspace path maps back onto the alias the client used. */
  clientPath(raw: string, path: string): string {
    const asked = toPath(raw);
    const workdir = this.session.backend.workdir;
    for (const alias of this.session.workspaceAliases) {
      if ((asked === alias || asked.startsWith(`${alias}/`)) && (path === workdir || path.startsWith(`${workdir}/`))) {
        return `${alias}${path.slice(workdir.length)}`;
      }
    }
    return path;
  }

  /**
   * The sandbox of one operation: the session policy, narrowed by the client's `narrowing`,
   * with writable roots and deny-read paths canonicalized like the paths they are compared with.
   */
  checker(narrowing?: SandboxNarrowing): Promise<Checker> {
    return this.#paths.checker(narrowing);
  }

  /** Canonical path of `path` (symlinks resolved; a missing tail kept as spelled). */
  canonical(path: string): Promise<string> {
    return this.#fs.realpath(path);
  }

  /** The canonical target of a write to `path`, checked against the sandbox. */
  async #checkedWriteTarget(path: string, narrowing?: SandboxNarrowing): Promise<string> {
    const check = await this.checker(narrowing);
    const target = await this.#paths.writeTarget(path);
    check.write(target);
    return target;
  }

  /** The canonical path and size of the file `path`, checked for reading; a directory is refused. */
  async #readableFile(path: string, narrowing?: SandboxNarrowing): Promise<{ path: string; size: number }> {
    const check = await this.checker(narrowing);
    const canonical = await this.#fs.realpath(path);
    check.read(canonical);
    const info = await this.#fs.stat(canonical);
    if (info.isDirectory) throw execError('EXEC_ERR_INVALID_REQUEST', `${path}: Is a directory`, { detail: { path } });
    if (!info.isFile) throw notRegularFile(path);
    return { path: canonical, size: info.size };
  }

  // ---- one-shot operations ------------------------------------------------------------

  /** Metadata of `path` itself (a symlink is reported as one); its target must be readable too. */
  async getMetadata(path: string, narrowing?: SandboxNarrowing): Promise<FileMetadata> {
    const check = await this.checker(narrowing);
    const link = await this.#paths.linkPath(path);
    check.read(link, 'metadata');
    const info = await this.#fs.stat(link);
    if (info.isSymlink) check.read(await this.#fs.realpath(link), 'metadata');
    return info;
  }

  /** The canonical form of `path`, which must exist and be readable. */
  async canonicalize(path: string, narrowing?: SandboxNarrowing): Promise<string> {
    const check = await this.checker(narrowing);
    const canonical = await this.#fs.realpath(path);
    check.read(canonical, 'canonicalize');
    await this.#fs.stat(canonical);
    return canonical;
  }

  /** The whole file, up to `limits.maxReadBytes`. */
  async readFile(path: string, narrowing?: SandboxNarrowing): Promise<Buffer> {
    const check = await this.checker(narrowing);
    const canonical = await this.#fs.realpath(path);
    check.read(canonical);
    return this.#fs.readFile(canonical, this.limits.maxReadBytes);
  }

  /** Writes `data` to `path` (created or truncated). */
  async writeFile(path: string, data: Buffer, narrowing?: SandboxNarrowing): Promise<void> {
    const target = await this.#checkedWriteTarget(path, narrowing);
    await this.#fs.writeFile(target, data);
    this.session.audit({ action: 'file.write', detail: { path: target, size: data.length } });
  }

  /** Creates the directory `path` (and its parents when `recursive`). */
  async createDirectory(path: string, recursive: boolean, narrowing?: SandboxNarrowing): Promise<void> {
    const target = await this.#checkedWriteTarget(path, narrowing);
    await this.#fs.createDirectory(target, recursive);
  }

  /** The entries of the directory `path`. */
  async readDirectory(
    path: string,
    narrowing?: SandboxNarrowing,
  ): Promise<Array<{ fileName: string; isDirectory: boolean; isFile: boolean }>> {
    const check = await this.checker(narrowing);
    const canonical = await this.#fs.realpath(path);
    check.read(canonical, 'listing');
    return this.#fs.readDirectory(canonical);
  }

  /** Removes `path` itself (a symlink, not its target); a tree only when `recursive`. */
  async remove(path: string, recursive: boolean, force: boolean, narrowing?: SandboxNarrowing): Promise<void> {
    const check = await this.checker(narrowing);
    const link = await this.#paths.linkPath(path);
    if (link === '/') throw execError('EXEC_ERR_FS_DENIED', 'refusing to remove /');
    check.write(link);
    if (recursive && containsDenied(check.sandbox, link))
      throw execError(
        'EXEC_ERR_FS_DENIED',
        `${link}: remove denied: the tree contains a path on the session's deny-read list`,
        { detail: { path: link } },
      );
    await this.#fs.remove(link, recursive, force);
    this.session.audit({ action: 'file.delete', detail: { path: link, recursive } });
  }

  /** Copies `source` to `destination`; a directory only when `recursive`, and only to a new path. */
  async copy(source: string, destination: string, recursive: boolean, narrowing?: SandboxNarrowing): Promise<void> {
    const check = await this.checker(narrowing);
    const from = await this.#fs.realpath(source);
    if (recursive) check.readTree(from, 'copy');
    else check.read(from, 'copy');
    const info = await this.#fs.stat(from);
    if (info.isDirectory && !recursive)
      throw execError('EXEC_ERR_INVALID_REQUEST', `${source}: Is a directory (pass recursive)`, {
        detail: { path: source, errno: 'EISDIR' },
      });
    // A FIFO would block the copy; a device would be copied as endless bytes or as a new device node.
    if (!info.isDirectory && !info.isFile) throw notRegularFile(source);
    const to = await this.#paths.writeTarget(destination);
    check.write(to);
    const existing = await this.#fs
      .stat(to)
      .catch((err: unknown) => (isNotFound(err) ? undefined : Promise.reject(err)));
    if (info.isDirectory) {
      // Copying into an existing tree could follow symlinks already planted there; refuse.
      if (existing)
        throw execError(
          'EXEC_ERR_INVALID_REQUEST',
          `${destination}: already exists; a directory is copied only to a new path`,
          { detail: { path: destination, errno: 'EEXIST' } },
        );
      if (to === from || to.startsWith(`${from}/`))
        throw execError('EXEC_ERR_INVALID_REQUEST', `${destination}: cannot copy a directory into itself`, {
          detail: { path: destination },
        });
    } else if (to === from) {
      const message = `${destination}: is the source itself; a file is not copied onto itself`;
      throw execError('EXEC_ERR_INVALID_REQUEST', message, { detail: { path: destination } });
    } else if (existing?.isDirectory) {
      // cp would copy into it (docker) or refuse (local): one answer, the request's mistake.
      const message = `${destination}: Is a directory; a file is copied to a file path`;
      throw execError('EXEC_ERR_INVALID_REQUEST', message, { detail: { path: destination, errno: 'EISDIR' } });
    } else if (existing && !existing.isFile) throw notRegularFile(destination);
    await this.#fs.copy(from, to, recursive);
    this.session.audit({ action: 'file.write', detail: { path: to, copiedFrom: from, size: info.size } });
  }

  // ---- streams (HTTP) -----------------------------------------------------------------

  /** A checked download: the file's bytes from `offset`, and its size when known. */
  async openDownload(path: string, offset = 0): Promise<{ stream: NodeJS.ReadableStream; size: number; path: string }> {
    // Past 2^53-1 the read stream throws (a 500); a caller whose schema has no bound lands here.
    if (!Number.isSafeInteger(offset) || offset < 0) {
      const message = `offset: ${offset} is not an integer from 0 to ${Number.MAX_SAFE_INTEGER}`;
      throw execError('EXEC_ERR_INVALID_PARAMS', message, { detail: { field: 'offset' } });
    }
    const file = await this.#readableFile(path);
    return { stream: await this.#fs.openRead(file.path, offset), size: file.size, path: file.path };
  }

  /** A checked upload: streams `source` into `path` (created or truncated); resolves with the bytes written. */
  async upload(path: string, source: NodeJS.ReadableStream): Promise<{ bytes: number; path: string }> {
    const target = await this.#prepareWrite(path);
    const bytes = await guardedWrite(() => this.#fs, target, source);
    this.session.audit({ action: 'file.write', detail: { path: target, size: bytes } });
    return { bytes, path: target };
  }

  async #prepareWrite(path: string, narrowing?: SandboxNarrowing): Promise<string> {
    const target = await this.#checkedWriteTarget(path, narrowing);
    const parent = await this.#fs.stat(posix.dirname(target));
    if (!parent.isDirectory)
      throw execError('EXEC_ERR_INVALID_REQUEST', `${posix.dirname(target)}: Not a directory`, { detail: { path } });
    const existing = await this.#fs
      .stat(target)
      .catch((err: unknown) => (isNotFound(err) ? undefined : Promise.reject(err)));
    if (existing?.isDirectory)
      throw execError('EXEC_ERR_INVALID_REQUEST', `${path}: Is a directory`, { detail: { path } });
    if (existing && !existing.isFile) throw notRegularFile(path);
    return target;
  }

  // ---- chunked handles ----------------------------------------------------------------

  /** `fs/open`: checks the path now; bytes are read lazily by `readBlock`. `owner`: see file-handles.ts. */
  async openRead(owner: string, path: string, requestedId?: string, narrowing?: SandboxNarrowing): Promise<string> {
    const file = await this.#readableFile(path, narrowing);
    return this.#handles.openRead(owner, file.path, requestedId);
  }

  /** `fs/readBlock`: `len` bytes at `offset` (sequential reads reuse one stream). */
  readBlock(owner: string, id: string, offset: number, len: number): Promise<{ chunk: Buffer; eof: boolean }> {
    return this.#handles.readBlock(owner, id, offset, len);
  }

  /** `fs/openWrite`: starts streaming into `path` (created or truncated). */
  async openWrite(owner: string, path: string, requestedId?: string, narrowing?: SandboxNarrowing): Promise<string> {
    const target = await this.#prepareWrite(path, narrowing);
    const id = await this.#handles.openWrite(owner, target, requestedId);
    this.#writeTargets.set(`${owner}\u0000${id}`, target);
    return id;
  }

  /** `fs/writeBlock`: appends `chunk`; resolves once the stream accepted it (backpressure). */
  writeBlock(owner: string, id: string, chunk: Buffer): Promise<number> {
    return this.#handles.writeBlock(owner, id, chunk);
  }

  /** `fs/closeWrite`: ends the stream and waits until the file is complete. */
  async closeWrite(owner: string, id: string): Promise<number> {
    const size = await this.#handles.closeWrite(owner, id);
    const key = `${owner}\u0000${id}`;
    this.session.audit({ action: 'file.write', detail: { path: this.#writeTargets.get(key) ?? null, size } });
    this.#writeTargets.delete(key);
    return size;
  }

  /** `fs/close`: closes a read handle; on a write handle, aborts the write (the file may be partial). */
  async closeHandle(owner: string, id: string): Promise<void> {
    this.#handles.close(owner, id);
    this.#writeTargets.delete(`${owner}\u0000${id}`);
  }

  get openHandles(): number {
    return this.#handles.size;
  }

  // ---- watches ------------------------------------------------------------------------

  /** `fs/watchMissing`: polls `missing` (expected absent) and `present` (expected there); notifies on a change. */
  watchMissing(
    wireId: string | number,
    missing: readonly string[],
    present: readonly string[],
    notifier: WatchNotifier,
  ): Promise<void> {
    return this.#watches.add(wireId, missing, present, notifier, () => this.checker());
  }

  /** `fs/unwatch`: drops the watch `wireId` of `notifier`'s client; false when it has none of that id. */
  unwatch(wireId: string | number, notifier: WatchNotifier): boolean {
    return this.#watches.remove(wireId, notifier);
  }

  /** Drops the watches of a client that went away. */
  dropWatchesOf(notifier: WatchNotifier): void {
    this.#watches.dropWatchesOf(notifier);
  }

  /** Closes every handle and watch (the session is being destroyed). */
  close(): void {
    this.#closed = true;
    this.#handles.closeAll();
    this.#watches.close();
  }
}
