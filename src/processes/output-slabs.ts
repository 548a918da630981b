/**
 * Recycled storage for the output chunks a process's log retains.
 *
 * Why: every read of a command's output arrives in a buffer Node allocated for that read. Kept
 * as is, those buffers outlive young-generation collections (the log retains 1 MiB per
 * process), so their memory returns only with a full collection, and a 256 MB stream made the
 * server take 10,000-24,000 page faults and 0.6-1.4 CPU-s. Copied into slabs that go back to
 * a pool when the log drops them, the read buffers die young and streaming allocates nothing:
 * 0.4-0.6 CPU-s and about 1.4x the throughput (docs/benchmarks.md).
 *
 * The rule that makes reuse safe: a chunk handed out by `SlabWriter.copy` is valid while the
 * log retains it and until the end of the event-loop turn in which the log dropped it (a
 * released slab is reused only from the next turn on). Whoever keeps output longer copies it.
 */

/** Slab size: sixteen chunks of the largest size (16 KiB, managed-process.ts). */
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

/** One process's copier into slabs. */
export class SlabWriter {
  #current: Slab | undefined;
  #copied = 0;

  /** Copies `parts` (`bytes` in all) into one chunk; `release` when the log drops it, once. */
  copy(parts: readonly Buffer[], bytes: number): { readonly data: Buffer; readonly release: (() => void) | undefined } {
    this.#copied += bytes;
    if (this.#copied <= PLAIN_COPY_BYTES || bytes > SLAB_BYTES) return { data: Buffer.concat(parts, bytes), release: undefined };
    let slab = this.#current;
    if (!slab || slab.used + bytes > SLAB_BYTES) {
      if (slab) pool.drop(slab);
      slab = this.#current = pool.take();
    }
    const start = slab.used;
    for (const part of parts) slab.used += part.copy(slab.buf, slab.used);
    slab.refs++;
    const owner = slab;
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      pool.drop(owner);
    };
    return { data: slab.buf.subarray(start, slab.used), release };
  }

  /** The process writes no more: its current slab returns once its chunks are released. */
  close(): void {
    if (this.#current) pool.drop(this.#current);
    this.#current = undefined;
  }
}
