/**
 * Reusable buffers for `process/output` frames.
 *
 * Why: a stream of output allocates one frame per chunk; each is external memory to V8, and
 * with 64 KiB chunks (87 KB frames) that churn alone started a full mark-compact every few
 * megabytes of a 256 MB stream (bench/compare-reference.ts with `--trace-gc`: 49-58 against
 * 30-39 with the pool, pipe throughput up about 10 %). A frame goes back to the pool once the
 * socket has written it; a frame that is never written (a closed socket) is simply dropped.
 */
export class FramePool {
  readonly #size: number;
  readonly #max: number;
  readonly #free: Buffer[] = [];

  /** Buffers of `size` bytes; at most `max` of them are kept for reuse. */
  constructor(size: number, max: number) {
    this.#size = size;
    this.#max = max;
  }

  /**
   * A buffer of exactly `bytes` and the function that returns it once it has been written
   * (`undefined` when `bytes` exceeds the pool's size: then it is a plain allocation).
   */
  take(bytes: number): { readonly frame: Buffer; readonly release: (() => void) | undefined } {
    if (bytes > this.#size) return { frame: Buffer.allocUnsafe(bytes), release: undefined };
    const whole = this.#free.pop() ?? Buffer.allocUnsafeSlow(this.#size);
    return {
      frame: whole.subarray(0, bytes),
      release: () => {
        if (this.#free.length < this.#max) this.#free.push(whole);
      },
    };
  }
}
