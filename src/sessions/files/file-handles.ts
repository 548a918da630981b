/**
 * Chunked read and write handles (`fs/open`, `fs/readBlock`, `fs/openWrite`, `fs/writeBlock`,
 * `fs/closeWrite`, `fs/close`): bounded per session, closed after idling or with the session.
 * Paths reach this module already canonical and checked.
 */
import { PassThrough } from 'node:stream';
import type { SessionFs } from '../../backends/types.ts';
import { execError, toExecError } from '../../errors.ts';
import type { FileLimits } from './file-limits.ts';
import { guardedWrite } from './guarded-write.ts';

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
  /** The handle's key in the table: its owner and its id. */
  readonly key: string;
  readonly path: string;
  reader: ByteReader | undefined;
  position: number;
  lastUsed: number;
  queue: Promise<unknown>;
}

interface WriteHandle {
  readonly kind: 'write';
  readonly id: string;
  readonly key: string;
  readonly path: string;
  readonly input: PassThrough;
  readonly done: Promise<number>;
  bytes: number;
  error: Error | undefined;
  lastUsed: number;
  queue: Promise<unknown>;
}

type Handle = ReadHandle | WriteHandle;

/** Serializes the operations on one handle (a block read must not interleave with another). */
function serialize<T>(handle: Handle, fn: () => Promise<T>): Promise<T> {
  const next = handle.queue.then(fn, fn);
  handle.queue = next.catch(() => undefined);
  return next;
}

/**
 * A handle belongs to whoever opened it (the caller's principal: a tenant token, or one session
 * token): ids are short and guessable (`fh-1`), and another caller, a read-only viewer say, must
 * not read from, write to or abort it. Another owner's id is simply unknown.
 */
const keyOf = (owner: string, id: string): string => `${owner}\u0000${id}`;

/** The open read and write handles of one session. */
export class FileHandles {
  readonly #limits: FileLimits;
  /** Taken anew on every use, so that a handle fails once the session is gone. */
  readonly #fs: () => SessionFs;
  readonly #handles = new Map<string, Handle>();
  #nextHandle = 1;
  #sweeper: NodeJS.Timeout | undefined;

  constructor(limits: FileLimits, fs: () => SessionFs) {
    this.#limits = limits;
    this.#fs = fs;
  }

  /** How many handles are open. */
  get size(): number {
    return this.#handles.size;
  }

  #newHandleId(requested: string | undefined, owner: string): string {
    if (this.#handles.size >= this.#limits.maxHandles) {
      throw execError(
        'EXEC_ERR_INVALID_REQUEST',
        `too many open file handles in this session (limit ${this.#limits.maxHandles}); close some with fs/close or fs/closeWrite`,
      );
    }
    if (requested !== undefined) {
      if (this.#handles.has(keyOf(owner, requested)))
        throw execError('EXEC_ERR_INVALID_REQUEST', `file handle ${requested} is already open`);
      return requested;
    }
    let id: string;
    do id = `fh-${this.#nextHandle++}`;
    while (this.#handles.has(keyOf(owner, id)));
    return id;
  }

  #handle(owner: string, id: string): Handle {
    const handle = this.#handles.get(keyOf(owner, id));
    if (!handle)
      throw execError('EXEC_ERR_INVALID_REQUEST', `unknown file handle ${id} (closed, idle-expired or never opened)`);
    handle.lastUsed = Date.now();
    return handle;
  }

  /** Opens a read handle of `owner` on the (checked, canonical) file `path`; no bytes are read yet. Returns its id. */
  openRead(owner: string, path: string, requestedId: string | undefined): string {
    const id = this.#newHandleId(requestedId, owner);
    const key = keyOf(owner, id);
    this.#handles.set(key, {
      kind: 'read',
      id,
      key,
      path,
      reader: undefined,
      position: -1,
      lastUsed: Date.now(),
      queue: Promise.resolve(),
    });
    this.#startSweeper();
    return id;
  }

  /** `len` bytes at `offset` (sequential reads reuse one stream). */
  readBlock(owner: string, id: string, offset: number, len: number): Promise<{ chunk: Buffer; eof: boolean }> {
    const handle = this.#handle(owner, id);
    if (handle.kind !== 'read')
      return Promise.reject(execError('EXEC_ERR_INVALID_REQUEST', `file handle ${id} was opened for writing`));
    if (len > this.#limits.maxBlockBytes) {
      return Promise.reject(
        execError(
          'EXEC_ERR_TOO_LARGE',
          `len ${len} exceeds the ${this.#limits.maxBlockBytes}-byte limit of fs/readBlock`,
          { detail: { field: 'len' } },
        ),
      );
    }
    return serialize(handle, async () => {
      if (!this.#handles.has(handle.key)) throw execError('EXEC_ERR_INVALID_REQUEST', `file handle ${id} was closed`);
      if (!handle.reader || handle.position !== offset) {
        handle.reader?.destroy();
        handle.reader = undefined;
        handle.reader = new ByteReader(await this.#fs().openRead(handle.path, offset), Math.max(len, 1024 * 1024));
        handle.position = offset;
      }
      if (len === 0) return { chunk: Buffer.alloc(0), eof: false };
      const block = await handle.reader.read(len);
      handle.position += block.chunk.length;
      return { chunk: block.chunk, eof: block.eof || block.chunk.length < len };
    });
  }

  /** Opens a write handle that streams into the (checked, canonical) `target`, created or truncated. Returns its id. */
  openWrite(owner: string, target: string, requestedId: string | undefined): string {
    const id = this.#newHandleId(requestedId, owner);
    const input = new PassThrough({ highWaterMark: 1024 * 1024 });
    const handle: WriteHandle = {
      kind: 'write',
      id,
      key: keyOf(owner, id),
      path: target,
      input,
      done: Promise.resolve(0),
      bytes: 0,
      error: undefined,
      lastUsed: Date.now(),
      queue: Promise.resolve(),
    };
    const done = guardedWrite(this.#fs, target, input);
    done.catch((err: unknown) => {
      handle.error ??= toExecError(err);
      input.destroy();
    });
    (handle as { done: Promise<number> }).done = done;
    this.#handles.set(handle.key, handle);
    this.#startSweeper();
    return id;
  }

  /** Appends `chunk`; resolves with the bytes written so far once the stream accepted it (backpressure). */
  writeBlock(owner: string, id: string, chunk: Buffer): Promise<number> {
    const handle = this.#handle(owner, id);
    if (handle.kind !== 'write')
      return Promise.reject(execError('EXEC_ERR_INVALID_REQUEST', `file handle ${id} was opened for reading`));
    return serialize(handle, async () => {
      if (handle.error) throw handle.error;
      if (!this.#handles.has(handle.key)) throw execError('EXEC_ERR_INVALID_REQUEST', `file handle ${id} was closed`);
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

  /** Ends a write handle's stream and waits until the file is complete; resolves with its size. */
  closeWrite(owner: string, id: string): Promise<number> {
    const handle = this.#handle(owner, id);
    if (handle.kind !== 'write')
      return Promise.reject(
        execError('EXEC_ERR_INVALID_REQUEST', `file handle ${id} was opened for reading; use fs/close`),
      );
    return serialize(handle, async () => {
      this.#handles.delete(handle.key);
      if (handle.error) throw handle.error;
      handle.input.end();
      return handle.done;
    });
  }

  /** Closes a read handle; on a write handle, aborts the write (the file may be partial). */
  close(owner: string, id: string): void {
    const handle = this.#handle(owner, id);
    this.#handles.delete(handle.key);
    this.#dispose(handle);
  }

  /** Closes every handle (the session is going away). */
  closeAll(): void {
    for (const handle of this.#handles.values()) this.#dispose(handle);
    this.#handles.clear();
    if (this.#sweeper) clearInterval(this.#sweeper);
    this.#sweeper = undefined;
  }

  #dispose(handle: Handle): void {
    if (handle.kind === 'read') {
      handle.reader?.destroy();
      handle.reader = undefined;
    } else {
      handle.error ??= execError('EXEC_ERR_FS', 'write handle aborted');
      handle.input.destroy(handle.error);
      handle.done.catch(() => undefined);
    }
  }

  #startSweeper(): void {
    if (this.#sweeper) return;
    this.#sweeper = setInterval(
      () => {
        const now = Date.now();
        for (const handle of [...this.#handles.values()]) {
          if (now - handle.lastUsed >= this.#limits.handleIdleMs) {
            this.#handles.delete(handle.key);
            this.#dispose(handle);
          }
        }
        if (this.#handles.size === 0 && this.#sweeper) {
          clearInterval(this.#sweeper);
          this.#sweeper = undefined;
        }
      },
      Math.min(30_000, Math.max(100, this.#limits.handleIdleMs / 4)),
    );
    this.#sweeper.unref();
  }
}
