/**
 * Codex's unified-exec output buffer (docs/protocol.md, "Tool facade"): bounded (default 1 MiB), split
 * 50/50 between the first bytes (head, filled first) and the newest bytes (tail); the bytes
 * dropped in between are counted and reported by a marker when drained.
 */

export const UNIFIED_EXEC_OUTPUT_MAX_BYTES = 1024 * 1024;

/** Bounded output between two calls: the first bytes and the newest, with a count of what was dropped between. */
export class HeadTailBuffer {
  readonly #headMax: number;
  readonly #tailMax: number;
  #head: Buffer[] = [];
  #headBytes = 0;
  #tail: Buffer[] = [];
  #tailBytes = 0;
  #omitted = 0;

  constructor(maxBytes = UNIFIED_EXEC_OUTPUT_MAX_BYTES) {
    this.#headMax = Math.floor(maxBytes / 2);
    this.#tailMax = maxBytes - this.#headMax;
  }

  get omittedBytes(): number {
    return this.#omitted;
  }

  get size(): number {
    return this.#headBytes + this.#tailBytes;
  }

  /** Keeps a copy: a log chunk's storage is reused once the log drops it (output-slabs.ts). */
  push(chunk: Buffer): void {
    let data = Buffer.from(chunk);
    if (this.#headBytes < this.#headMax) {
      const take = Math.min(this.#headMax - this.#headBytes, data.length);
      this.#head.push(data.subarray(0, take));
      this.#headBytes += take;
      data = data.subarray(take);
    }
    if (data.length === 0) return;
    this.#tail.push(data);
    this.#tailBytes += data.length;
    while (this.#tailBytes > this.#tailMax) {
      const first = this.#tail[0];
      if (!first) break;
      const excess = this.#tailBytes - this.#tailMax;
      if (first.length <= excess) {
        this.#tail.shift();
        this.#tailBytes -= first.length;
        this.#omitted += first.length;
      } else {
        this.#tail[0] = first.subarray(excess);
        this.#tailBytes -= excess;
        this.#omitted += excess;
      }
    }
  }

  /** Everything buffered (with the omitted-bytes marker when bytes were dropped), then empty. */
  drain(): Buffer {
    const parts = [...this.#head];
    if (this.#omitted > 0) parts.push(Buffer.from(`\n... ${this.#omitted} bytes omitted ...\n`));
    parts.push(...this.#tail);
    this.#head = [];
    this.#tail = [];
    this.#headBytes = 0;
    this.#tailBytes = 0;
    this.#omitted = 0;
    return Buffer.concat(parts);
  }
}
