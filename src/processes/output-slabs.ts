/**
 * Recycled storage for the output chunks a process's log retains.
 *
 * Why: kept as they arrived, output buffers outlive young-generation collections (the log
 * retains 1 MiB per process), so their memory returns only with a full collection, and a
 * 256 MB stream made the server take 10,000-24,000 page faults and 0.6-1.4 CPU-s. Copied into
 * slabs that go back to a pool when the log drops them, a streaming process reuses the same few
 * slabs: 0.46-0.65 CPU-s in the same benchmark (docs/benchmarks.md).
 *
 * The rule that makes reuse safe: a chunk handed out by `SlabWriter.take` is valid while the
 * log retains it and until the end of the event-loop turn in which the log dropped it (a
 * released slab is reused only from the next turn on). Whoever keeps output longer copies it.
 */

/** Slab size: sixteen chunks of the largest size (16 KiB, output-coalescer.ts). */
const SLAB_BYTES = 256 * 1024;
/** Free slabs kept for reuse (8 MiB); more are left to the garbage collector. */
const MAX_FREE = 32;
/**
 * A process's first output is copied plainly: most commands print little, and a slab pinned
 * by a few retained lines of each finished process would waste most of it. Past this, the
 * process streams, and its retained output fills its slabs.
 */
const PLAIN_COPY_BYTES = 1024 * 1024;

class Slab {
  readonly buf: Buffer;
  used = 0;
  /** Chunks not yet released, plus one while it is a writer's current slab. */
  refs = 1;

  constructor(buf: Buffer) {
    this.buf = buf;
  }
}

class SlabPool {
  readonly #free: Buffer[] = [];
  #quarantine: Buffer[] = [];
  #sweep: NodeJS.Immediate | undefined;

  take(): Slab {
    return new Slab(this.#free.pop() ?? Buffer.allocUnsafeSlow(SLAB_BYTES));
  }

  drop(slab: Slab): void {
    if (--slab.refs > 0) return;
    // Not reusable before the next turn: see the rule in the file comment.
    this.#quarantine.push(slab.buf);
    this.#sweep ??= setImmediate(() => {
      this.#sweep = undefined;
      for (const buf of this.#quarantine.splice(0)) if (this.#free.length < MAX_FREE) this.#free.push(buf);
    });
  }
}

const pool = new SlabPool();

/**
 * One process's output storage: bytes are copied in as they arrive (`append`), and what has
 * gathered becomes one chunk with `take`. Copying at once lets a backend hand over a buffer it
 * reuses for its next read.
 */
export class SlabWriter {
  #current: Slab | undefined;
  /** Start of the open chunk in the current slab (slab mode). */
  #start = 0;
  /** The open chunk in plain mode. */
  #plain: Buffer[] = [];
  #plainBytes = 0;
  #inSlab = false;
  #copied = 0;

  /** Bytes appended since the last `take`. */
  get pendingBytes(): number {
    return this.#inSlab && this.#current ? this.#current.used - this.#start : this.#plainBytes;
  }

  /** Copies `data` (at most SLAB_BYTES for the open chunk in all) into the open chunk. */
  append(data: Buffer): void {
    if (this.pendingBytes === 0) this.#inSlab = this.#copied >= PLAIN_COPY_BYTES;
    this.#copied += data.length;
    if (!this.#inSlab) {
      this.#plain.push(Buffer.from(data));
      this.#plainBytes += data.length;
      return;
    }
    if (this.pendingBytes + data.length > SLAB_BYTES)
      throw new RangeError(`an output chunk grew past ${SLAB_BYTES} bytes`);
    let slab = this.#current;
    if (!slab || slab.used + data.length > SLAB_BYTES) {
      // The open chunk moves to a fresh slab so that it stays contiguous.
      const next = pool.take();
      if (slab) {
        next.used = slab.buf.copy(next.buf, 0, this.#start, slab.used);
        pool.drop(slab);
      }
      slab = this.#current = next;
      this.#start = 0;
    }
    slab.used += data.copy(slab.buf, slab.used);
  }

  /** The open chunk, closed; `release` (when set) when the log drops it, once. */
  take(): { readonly data: Buffer; readonly release: (() => void) | undefined } | undefined {
    if (this.pendingBytes === 0) return undefined;
    if (!this.#inSlab || !this.#current) {
      const data = this.#plain.length === 1 ? this.#plain[0]! : Buffer.concat(this.#plain, this.#plainBytes);
      this.#plain = [];
      this.#plainBytes = 0;
      return { data, release: undefined };
    }
    const slab = this.#current;
    const data = slab.buf.subarray(this.#start, slab.used);
    this.#start = slab.used;
    slab.refs++;
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      pool.drop(slab);
    };
    return { data, release };
  }

  /** The process writes no more: its current slab returns once its chunks are released. */
  close(): void {
    if (this.#current) pool.drop(this.#current);
    this.#current = undefined;
  }
}
