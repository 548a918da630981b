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
 * Also here: chunked read and write handles (bounded per session, closed with the session or
 * after idling) and `fs/watchMissing` watches (polled; bounded).
 */
import { posix } from 'node:path';
import { PassThrough } from 'node:stream';
import type { FileMetadata, ResolvedSandbox, SessionFs } from '../backends/types.ts';
import { execError, ExecServerError } from '../errors.ts';
import { canRead, canWrite, containsDenied, resolveSandbox, type SandboxNarrowing } from '../policy/sandbox-policy.ts';
import type { Session } from './session.ts';
import { toPath } from './session-spec.ts';

export interface FileLimits {
  /** Largest `fs/readFile` answer (bytes); bigger files need chunked reads or the HTTP download. */
  readonly maxReadBytes: number;
  /** Largest block one `fs/readBlock` returns. */
  readonly maxBlockBytes: number;
  /** Open read plus write handles per session. */
  readonly maxHandles: number;
  /** A handle unused this long is closed (a write handle is aborted). */
  readonly handleIdleMs: number;
  /** `fs/watchMissing` watches per session, and paths per watch. */
  readonly maxWatches: number;
  readonly maxWatchPaths: number;
  /** How often watched paths are polled. */
  readonly watchIntervalMs: number;
}

export const DEFAULT_FILE_LIMITS: FileLimits = {
  maxReadBytes: 64 * 1024 * 1024,
  maxBlockBytes: 8 * 1024 * 1024,
  maxHandles: 16,
  handleIdleMs: 10 * 60_000,
  maxWatches: 16,
  maxWatchPaths: 64,
  watchIntervalMs: 1000,
};

/** Something that can receive `fs/missingChanged` (a WebSocket connection). False once it is gone. */
export interface WatchNotifier {
  notify(method: string, params: unknown): boolean;
}

/** How long canonical forms of the policy's roots and deny-read paths are reused. */
const ROOT_CACHE_MS = 5000;

/** The sandbox one operation is checked against: resolved from the session policy, paths canonical. */
class Checker {
  readonly sandbox: ResolvedSandbox;
  readonly #policyName: string;

  constructor(sandbox: ResolvedSandbox, policyName: string) {
    this.sandbox = sandbox;
    this.#policyName = policyName;
  }

  read(path: string, what = 'read'): void {
    if (!canRead(this.sandbox, path)) throw execError('EXEC_ERR_FS_DENIED', `${path}: ${what} denied: the path is on the session's deny-read list`, { detail: { path } });
  }

  readTree(path: string, what: string): void {
    this.read(path, what);
    if (containsDenied(this.sandbox, path)) throw execError('EXEC_ERR_FS_DENIED', `${path}: ${what} denied: the tree contains a path on the session's deny-read list`, { detail: { path } });
  }

  write(path: string): void {
    if (this.sandbox.kind === 'unrestricted' || canWrite(this.sandbox, path)) return;
    this.read(path, 'write');
    if (this.sandbox.writableRoots.length === 0) throw execError('EXEC_ERR_FS_DENIED', `${path}: write denied: the sandbox is read-only`, { detail: { path } });
    throw execError('EXEC_ERR_FS_DENIED', `${path}: write denied: outside the writable roots of the ${this.#policyName} sandbox (${this.sandbox.writableRoots.join(', ')})`, { detail: { path } });
  }
}

/** Pulls exact-size blocks out of a stream, with a bounded read-ahead. */
class ByteReader {
  readonly #stream: NodeJS.ReadableStream;
  readonly #highWater: number;
  #chunks: Buffer[] = [];
  #size = 0;
  #ended = false;
  #error: Error | undefined;
  #wake: (() => void) | undefined;

  constructor(stream: NodeJS.ReadableStream, highWater: number) {
    this.#stream = stream;
    this.#highWater = highWater;
    stream.on('data', (chunk: Buffer | string) => {
      const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      this.#chunks.push(buf);
      this.#size += buf.length;
      if (this.#size >= this.#highWater) stream.pause();
      this.#notify();
    });
    stream.on('end', () => {
      this.#ended = true;
      this.#notify();
    });
    stream.on('error', (err: Error) => {
      this.#error = err;
      this.#notify();
    });
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  async read(len: number): Promise<{ chunk: Buffer; eof: boolean }> {
    while (this.#size < len && !this.#ended && !this.#error) {
      this.#stream.resume();
      await new Promise<void>((resolve) => (this.#wake = resolve));
    }
    if (this.#error) throw this.#error;
    const all = this.#chunks.length === 1 ? (this.#chunks[0] as Buffer) : Buffer.concat(this.#chunks, this.#size);
    const chunk = all.subarray(0, len);
    const rest = all.subarray(chunk.length);
    this.#chunks = rest.length > 0 ? [rest] : [];
    this.#size = rest.length;
    if (this.#size < this.#highWater && !this.#ended) this.#stream.resume();
    return { chunk: Buffer.from(chunk), eof: this.#ended && this.#size === 0 };
  }

  destroy(): void {
    const s = this.#stream as NodeJS.ReadableStream & { destroy?: () => void };
    s.destroy?.();
  }
}

interface ReadHandle {
  readonly kind: 'read';
  readonly id: string;
  readonly path: string;
  reader: ByteReader | undefined;
  position: number;
  lastUsed: number;
  queue: Promise<unknown>;
}

interface WriteHandle {
  readonly kind: 'write';
  readonly id: string;
  readonly path: string;
  readonly input: PassThrough;
  readonly done: Promise<number>;
  bytes: number;
  error: Error | undefined;
  lastUsed: number;
  queue: Promise<unknown>;
}

type Handle = ReadHandle | WriteHandle;

interface Watch {
  readonly id: string;
  /** The id as the client sent it (Codex uses numbers), echoed in `fs/missingChanged`. */
  readonly wireId: string | number;
  readonly notifier: WatchNotifier;
  /** Path (in the session) -> whether it was there at the last look. */
  readonly state: Map<string, boolean>;
}

const isNotFound = (err: unknown): boolean => err instanceof ExecServerError && err.code === 'EXEC_ERR_NOT_FOUND';

/** Serializes the operations on one handle (a block read must not interleave with another). */
function serialize<T>(handle: Handle, fn: () => Promise<T>): Promise<T> {
  const next = handle.queue.then(fn, fn);
  handle.queue = next.catch(() => undefined);
  return next;
}

const registry = new WeakMap<Session, SessionFiles>();

export class SessionFiles {
  readonly session: Session;
  readonly limits: FileLimits;
  readonly #handles = new Map<string, Handle>();
  readonly #watches = new Map<string, Watch>();
  readonly #canonical = new Map<string, { path: string; at: number }>();
  #nextHandle = 1;
  #sweeper: NodeJS.Timeout | undefined;
  #poller: NodeJS.Timeout | undefined;
  #polling = false;
  #closed = false;

  /** The one `SessionFiles` of `session` (created on first use, disposed with the session). */
  static for(session: Session, limits: Partial<FileLimits> = {}): SessionFiles {
    let files = registry.get(session);
    if (!files) {
      files = new SessionFiles(session, { ...DEFAULT_FILE_LIMITS, ...limits });
      registry.set(session, files);
    }
    return files;
  }

  private constructor(session: Session, limits: FileLimits) {
    this.session = session;
    this.limits = limits;
    session.onDestroy(() => this.close());
  }

  get #fs(): SessionFs {
    if (this.#closed) throw execError('EXEC_ERR_SESSION_DEAD', 'session was deleted');
    if (this.session.status.status === 'dead') throw execError('EXEC_ERR_SESSION_DEAD', `session is dead: ${this.session.status.reason}`);
    return this.session.backend.fs;
  }

  /** A client path (absolute or `file://`) as an absolute, normalized path inside the session. */
  resolvePath(raw: string, field = 'path'): string {
    let path: string;
    try {
      path = toPath(raw);
    } catch (err) {
      if (err instanceof ExecServerError) throw err;
      throw execError('EXEC_ERR_INVALID_PARAMS', `${field}: ${JSON.stringify(raw)} is not a valid file URI`, { detail: { field } });
    }
    if (!posix.isAbsolute(path)) throw execError('EXEC_ERR_INVALID_PARAMS', `${field}: ${JSON.stringify(raw)} is not absolute; send an absolute path or a file:// URI`, { detail: { field } });
    if (path.includes('\0')) throw execError('EXEC_ERR_INVALID_PARAMS', `${field}: contains a NUL byte`, { detail: { field } });
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

  async #realpathCached(path: string): Promise<string> {
    const hit = this.#canonical.get(path);
    if (hit && Date.now() - hit.at < ROOT_CACHE_MS) return hit.path;
    const canonical = await this.#fs.realpath(path).catch(() => path);
    this.#canonical.set(path, { path: canonical, at: Date.now() });
    return canonical;
  }

  /**
   * The sandbox of one operation: the session policy, narrowed by the client's `narrowing`,
   * with writable roots and deny-read paths canonicalized like the paths they are compared with.
   */
  async checker(narrowing?: SandboxNarrowing): Promise<Checker> {
    const policy = this.session.spec.policy;
    const resolved = resolveSandbox(policy, this.session.backend.workdir, narrowing);
    if (resolved.kind === 'unrestricted') return new Checker(resolved, policy.sandbox.type);
    const roots = await Promise.all(resolved.writableRoots.map((r) => this.#realpathCached(r)));
    const denied = await Promise.all(resolved.denyRead.map((d) => this.#realpathCached(d)));
    return new Checker(
      { ...resolved, writableRoots: [...new Set(roots)], denyRead: [...new Set([...resolved.denyRead.map((d) => posix.normalize(d)), ...denied])] },
      policy.sandbox.type,
    );
  }

  /** Canonical path of `path` (symlinks resolved; a missing tail kept as spelled). */
  canonical(path: string): Promise<string> {
    return this.#fs.realpath(path);
  }

  /** Where `path` itself lives: its parent canonicalized, its last component kept (a link stays a link). */
  async #linkPath(path: string): Promise<string> {
    if (path === '/') return '/';
    return posix.join(await this.#fs.realpath(posix.dirname(path)), posix.basename(path));
  }

  /**
   * Canonical target of a write. `realpath` keeps a missing tail as spelled; when the first
   * existing component of that tail is a (dangling) symlink, writing there would follow it to
   * wherever it points, so that is refused.
   */
  async #writeTarget(path: string): Promise<string> {
    const target = await this.#fs.realpath(path);
    for (let p = target; ; p = posix.dirname(p)) {
      let info: FileMetadata;
      try {
        info = await this.#fs.stat(p);
      } catch (err) {
        if (isNotFound(err) && p !== '/') continue;
        throw err;
      }
      if (info.isSymlink) throw execError('EXEC_ERR_FS_DENIED', `${p}: is a dangling symbolic link; refusing to write through it`, { detail: { path } });
      return target;
    }
  }

  // ---- one-shot operations ------------------------------------------------------------

  async getMetadata(path: string, narrowing?: SandboxNarrowing): Promise<FileMetadata> {
    const check = await this.checker(narrowing);
    const link = await this.#linkPath(path);
    check.read(link, 'metadata');
    const info = await this.#fs.stat(link);
    if (info.isSymlink) check.read(await this.#fs.realpath(link), 'metadata');
    return info;
  }

  async canonicalize(path: string, narrowing?: SandboxNarrowing): Promise<string> {
    const check = await this.checker(narrowing);
    const canonical = await this.#fs.realpath(path);
    check.read(canonical, 'canonicalize');
    await this.#fs.stat(canonical);
    return canonical;
  }

  async readFile(path: string, narrowing?: SandboxNarrowing): Promise<Buffer> {
    const check = await this.checker(narrowing);
    const canonical = await this.#fs.realpath(path);
    check.read(canonical);
    return this.#fs.readFile(canonical, this.limits.maxReadBytes);
  }

  async writeFile(path: string, data: Buffer, narrowing?: SandboxNarrowing): Promise<void> {
    const check = await this.checker(narrowing);
    const target = await this.#writeTarget(path);
    check.write(target);
    await this.#fs.writeFile(target, data);
  }

  async createDirectory(path: string, recursive: boolean, narrowing?: SandboxNarrowing): Promise<void> {
    const check = await this.checker(narrowing);
    const target = await this.#writeTarget(path);
    check.write(target);
    await this.#fs.createDirectory(target, recursive);
  }

  async readDirectory(path: string, narrowing?: SandboxNarrowing): Promise<Array<{ fileName: string; isDirectory: boolean; isFile: boolean }>> {
    const check = await this.checker(narrowing);
    const canonical = await this.#fs.realpath(path);
    check.read(canonical, 'listing');
    return this.#fs.readDirectory(canonical);
  }

  async remove(path: string, recursive: boolean, force: boolean, narrowing?: SandboxNarrowing): Promise<void> {
    const check = await this.checker(narrowing);
    const link = await this.#linkPath(path);
    if (link === '/') throw execError('EXEC_ERR_FS_DENIED', 'refusing to remove /');
    check.write(link);
    if (recursive && containsDenied(check.sandbox, link)) throw execError('EXEC_ERR_FS_DENIED', `${link}: remove denied: the tree contains a path on the session's deny-read list`, { detail: { path: link } });
    await this.#fs.remove(link, recursive, force);
  }

  async copy(source: string, destination: string, recursive: boolean, narrowing?: SandboxNarrowing): Promise<void> {
    const check = await this.checker(narrowing);
    const from = await this.#fs.realpath(source);
    if (recursive) check.readTree(from, 'copy');
    else check.read(from, 'copy');
    const info = await this.#fs.stat(from);
    if (info.isDirectory && !recursive) throw execError('EXEC_ERR_FS', `${source}: Is a directory (pass recursive)`, { detail: { path: source } });
    const to = await this.#writeTarget(destination);
    check.write(to);
    if (info.isDirectory) {
      // Copying into an existing tree could follow symlinks already planted there; refuse.
      const exists = await this.#fs.stat(to).then(() => true, (err: unknown) => (isNotFound(err) ? false : Promise.reject(err)));
      if (exists) throw execError('EXEC_ERR_FS', `${destination}: already exists; a directory is copied only to a new path`, { detail: { path: destination } });
      if (to === from || to.startsWith(`${from}/`)) throw execError('EXEC_ERR_FS', `${destination}: cannot copy a directory into itself`, { detail: { path: destination } });
    }
    await this.#fs.copy(from, to, recursive);
  }

  // ---- streams (HTTP) -----------------------------------------------------------------

  /** A checked download: the file's bytes from `offset`, and its size when known. */
  async openDownload(path: string, offset = 0): Promise<{ stream: NodeJS.ReadableStream; size: number; path: string }> {
    const check = await this.checker();
    const canonical = await this.#fs.realpath(path);
    check.read(canonical);
    const info = await this.#fs.stat(canonical);
    if (info.isDirectory) throw execError('EXEC_ERR_INVALID_REQUEST', `${path}: Is a directory`, { detail: { path } });
    return { stream: await this.#fs.openRead(canonical, offset), size: info.size, path: canonical };
  }

  /** A checked upload: streams `source` into `path` (created or truncated); resolves with the bytes written. */
  async upload(path: string, source: NodeJS.ReadableStream): Promise<{ bytes: number; path: string }> {
    const target = await this.#prepareWrite(path);
    return { bytes: await this.#guardedWrite(target, source), path: target };
  }

  /**
   * `writeStream` fed through a stream of our own, so that a failing or aborted `source` (a
   * client that disconnects mid-upload, an aborted write handle) never reaches the backend as a
   * stream error: the feed is ended, the partial file removed, and the failure reported.
   */
  async #guardedWrite(target: string, source: NodeJS.ReadableStream): Promise<number> {
    const fs = this.#fs;
    const feed = new PassThrough({ highWaterMark: 1024 * 1024 });
    let failure: Error | undefined;
    let ended = false;
    const fail = (err: Error): void => {
      if (failure || ended) return;
      failure = err;
      source.unpipe(feed);
      feed.end();
    };
    source.on('error', fail);
    source.on('end', () => (ended = true));
    source.on('close', () => fail(new Error('the upload ended before its last byte')));
    source.pipe(feed);
    let bytes = 0;
    try {
      bytes = await fs.writeStream(target, feed);
    } catch (err) {
      failure ??= err instanceof Error ? err : new Error(String(err));
      source.unpipe(feed);
      (source as NodeJS.ReadableStream & { resume(): void }).resume();
    }
    if (failure) {
      if (!(failure instanceof ExecServerError)) await fs.remove(target, false, true).catch(() => undefined);
      throw failure instanceof ExecServerError ? failure : execError('EXEC_ERR_FS', `${target}: write aborted: ${failure.message}; the partial file was removed`, { cause: failure, detail: { path: target } });
    }
    return bytes;
  }

  async #prepareWrite(path: string, narrowing?: SandboxNarrowing): Promise<string> {
    const check = await this.checker(narrowing);
    const target = await this.#writeTarget(path);
    check.write(target);
    const parent = await this.#fs.stat(posix.dirname(target));
    if (!parent.isDirectory) throw execError('EXEC_ERR_FS', `${posix.dirname(target)}: Not a directory`, { detail: { path } });
    const existing = await this.#fs.stat(target).catch((err: unknown) => (isNotFound(err) ? undefined : Promise.reject(err)));
    if (existing?.isDirectory) throw execError('EXEC_ERR_INVALID_REQUEST', `${path}: Is a directory`, { detail: { path } });
    return target;
  }

  // ---- chunked handles ----------------------------------------------------------------

  #newHandleId(requested: string | undefined): string {
    if (this.#handles.size >= this.limits.maxHandles) {
      throw execError('EXEC_ERR_INVALID_REQUEST', `too many open file handles in this session (limit ${this.limits.maxHandles}); close some with fs/close or fs/closeWrite`);
    }
    if (requested !== undefined) {
      if (this.#handles.has(requested)) throw execError('EXEC_ERR_INVALID_REQUEST', `file handle ${requested} is already open`);
      return requested;
    }
    let id: string;
    do id = `fh-${this.#nextHandle++}`;
    while (this.#handles.has(id));
    return id;
  }

  #handle(id: string): Handle {
    const handle = this.#handles.get(id);
    if (!handle) throw execError('EXEC_ERR_INVALID_REQUEST', `unknown file handle ${id} (closed, idle-expired or never opened)`);
    handle.lastUsed = Date.now();
    return handle;
  }

  /** `fs/open`: checks the path now; bytes are read lazily by `readBlock`. */
  async openRead(path: string, requestedId?: string, narrowing?: SandboxNarrowing): Promise<string> {
    const check = await this.checker(narrowing);
    const canonical = await this.#fs.realpath(path);
    check.read(canonical);
    const info = await this.#fs.stat(canonical);
    if (info.isDirectory) throw execError('EXEC_ERR_INVALID_REQUEST', `${path}: Is a directory`, { detail: { path } });
    const id = this.#newHandleId(requestedId);
    this.#handles.set(id, { kind: 'read', id, path: canonical, reader: undefined, position: -1, lastUsed: Date.now(), queue: Promise.resolve() });
    this.#startSweeper();
    return id;
  }

  /** `fs/readBlock`: `len` bytes at `offset` (sequential reads reuse one stream). */
  readBlock(id: string, offset: number, len: number): Promise<{ chunk: Buffer; eof: boolean }> {
    const handle = this.#handle(id);
    if (handle.kind !== 'read') return Promise.reject(execError('EXEC_ERR_INVALID_REQUEST', `file handle ${id} was opened for writing`));
    if (len > this.limits.maxBlockBytes) {
      return Promise.reject(execError('EXEC_ERR_TOO_LARGE', `len ${len} exceeds the ${this.limits.maxBlockBytes}-byte limit of fs/readBlock`, { detail: { field: 'len' } }));
    }
    return serialize(handle, async () => {
      if (!this.#handles.has(id)) throw execError('EXEC_ERR_INVALID_REQUEST', `file handle ${id} was closed`);
      if (!handle.reader || handle.position !== offset) {
        handle.reader?.destroy();
        handle.reader = undefined;
        handle.reader = new ByteReader(await this.#fs.openRead(handle.path, offset), Math.max(len, 1024 * 1024));
        handle.position = offset;
      }
      if (len === 0) return { chunk: Buffer.alloc(0), eof: false };
      const block = await handle.reader.read(len);
      handle.position += block.chunk.length;
      return { chunk: block.chunk, eof: block.eof || block.chunk.length < len };
    });
  }

  /** `fs/openWrite`: starts streaming into `path` (created or truncated). */
  async openWrite(path: string, requestedId?: string, narrowing?: SandboxNarrowing): Promise<string> {
    const target = await this.#prepareWrite(path, narrowing);
    const id = this.#newHandleId(requestedId);
    const input = new PassThrough({ highWaterMark: 1024 * 1024 });
    const handle: WriteHandle = {
      kind: 'write',
      id,
      path: target,
      input,
      done: Promise.resolve(0),
      bytes: 0,
      error: undefined,
      lastUsed: Date.now(),
      queue: Promise.resolve(),
    };
    const done = this.#guardedWrite(target, input);
    done.catch((err: unknown) => {
      handle.error ??= err instanceof Error ? err : new Error(String(err));
      input.destroy();
    });
    (handle as { done: Promise<number> }).done = done;
    this.#handles.set(id, handle);
    this.#startSweeper();
    return id;
  }

  /** `fs/writeBlock`: appends `chunk`; resolves once the stream accepted it (backpressure). */
  writeBlock(id: string, chunk: Buffer): Promise<number> {
    const handle = this.#handle(id);
    if (handle.kind !== 'write') return Promise.reject(execError('EXEC_ERR_INVALID_REQUEST', `file handle ${id} was opened for reading`));
    return serialize(handle, async () => {
      if (handle.error) throw handle.error;
      if (!this.#handles.has(id)) throw execError('EXEC_ERR_INVALID_REQUEST', `file handle ${id} was closed`);
      if (!handle.input.write(chunk)) {
        await new Promise<void>((resolve) => {
          const finish = (): void => {
            handle.input.off('drain', finish);
            handle.input.off('close', finish);
            resolve();
          };
          handle.input.on('drain', finish);
          handle.input.on('close', finish);
          void handle.done.then(finish, finish);
        });
      }
      if (handle.error) throw handle.error;
      handle.bytes += chunk.length;
      return handle.bytes;
    });
  }

  /** `fs/closeWrite`: ends the stream and waits until the file is complete. */
  closeWrite(id: string): Promise<number> {
    const handle = this.#handle(id);
    if (handle.kind !== 'write') return Promise.reject(execError('EXEC_ERR_INVALID_REQUEST', `file handle ${id} was opened for reading; use fs/close`));
    return serialize(handle, async () => {
      this.#handles.delete(id);
      if (handle.error) throw handle.error;
      handle.input.end();
      return handle.done;
    });
  }

  /** `fs/close`: closes a read handle; on a write handle, aborts the write (the file may be partial). */
  async closeHandle(id: string): Promise<void> {
    const handle = this.#handle(id);
    this.#handles.delete(id);
    this.#dispose(handle);
  }

  #dispose(handle: Handle): void {
    if (handle.kind === 'read') {
      handle.reader?.destroy();
      handle.reader = undefined;
    } else {
      handle.error ??= new Error('write handle aborted');
      handle.input.destroy(handle.error);
      handle.done.catch(() => undefined);
    }
  }

  get openHandles(): number {
    return this.#handles.size;
  }

  #startSweeper(): void {
    if (this.#sweeper) return;
    this.#sweeper = setInterval(() => {
      const now = Date.now();
      for (const handle of [...this.#handles.values()]) {
        if (now - handle.lastUsed >= this.limits.handleIdleMs) {
          this.#handles.delete(handle.id);
          this.#dispose(handle);
        }
      }
      if (this.#handles.size === 0 && this.#sweeper) {
        clearInterval(this.#sweeper);
        this.#sweeper = undefined;
      }
    }, Math.min(30_000, Math.max(100, this.limits.handleIdleMs / 4)));
    this.#sweeper.unref();
  }

  // ---- watches ------------------------------------------------------------------------

  /** `fs/watchMissing`: polls `missing` (expected absent) and `present` (expected there); notifies on a change. */
  async watchMissing(wireId: string | number, missing: readonly string[], present: readonly string[], notifier: WatchNotifier): Promise<void> {
    const watchId = String(wireId);
    if (missing.length + present.length > this.limits.maxWatchPaths) {
      throw execError('EXEC_ERR_TOO_LARGE', `a watch may cover at most ${this.limits.maxWatchPaths} paths`, { detail: { field: 'missing' } });
    }
    if (!this.#watches.has(watchId) && this.#watches.size >= this.limits.maxWatches) {
      throw execError('EXEC_ERR_INVALID_REQUEST', `too many watches in this session (limit ${this.limits.maxWatches})`);
    }
    const check = await this.checker();
    const state = new Map<string, boolean>();
    for (const [paths, there] of [[missing, false], [present, true]] as const) {
      for (const path of paths) {
        check.read(path, 'watch');
        state.set(path, there);
      }
    }
    this.#watches.set(watchId, { id: watchId, wireId, notifier, state });
    if (!this.#poller) {
      this.#poller = setInterval(() => void this.#poll(), this.limits.watchIntervalMs);
      this.#poller.unref();
    }
  }

  unwatch(wireId: string | number): boolean {
    const had = this.#watches.delete(String(wireId));
    this.#stopPollerIfIdle();
    return had;
  }

  #stopPollerIfIdle(): void {
    if (this.#watches.size === 0 && this.#poller) {
      clearInterval(this.#poller);
      this.#poller = undefined;
    }
  }

  async #poll(): Promise<void> {
    if (this.#polling || this.#closed) return;
    this.#polling = true;
    try {
      for (const watch of [...this.#watches.values()]) {
        let changed = false;
        for (const [path, was] of watch.state) {
          const is = await this.session.backend.fs.stat(path).then(
            () => true,
            (err: unknown) => (isNotFound(err) ? false : was),
          );
          if (is !== was) {
            watch.state.set(path, is);
            changed = true;
          }
        }
        if (!this.#watches.has(watch.id)) continue;
        if (changed && !watch.notifier.notify('fs/missingChanged', { watchId: watch.wireId })) this.#watches.delete(watch.id);
      }
    } catch {
      // A dying session: the next tick (or close) settles it.
    } finally {
      this.#polling = false;
      this.#stopPollerIfIdle();
    }
  }

  /** Drops the watches of a client that went away. */
  dropWatchesOf(notifier: WatchNotifier): void {
    for (const watch of [...this.#watches.values()]) if (watch.notifier === notifier) this.#watches.delete(watch.id);
    this.#stopPollerIfIdle();
  }

  /** Closes every handle and watch (the session is being destroyed). */
  close(): void {
    this.#closed = true;
    for (const handle of this.#handles.values()) this.#dispose(handle);
    this.#handles.clear();
    this.#watches.clear();
    if (this.#sweeper) clearInterval(this.#sweeper);
    if (this.#poller) clearInterval(this.#poller);
    this.#sweeper = undefined;
    this.#poller = undefined;
    registry.delete(this.session);
  }
}
