/**
 * How many pre-started containers a warm pool keeps ready: the largest demand seen in any
 * `burstMs` window during the last `idleMs`, between `min` and `max`. A burst therefore sizes
 * the pool for the next burst of the same kind, and a pool nobody draws from falls back to its
 * minimum once `idleMs` has passed without demand. Pure (the clock is passed in), so the
 * sizing is tested without an engine.
 */

export interface PoolSizing {
  /** Containers kept ready whatever the demand. */
  readonly min: number;
  /** Containers kept ready at most, whatever the demand. */
  readonly max: number;
  /** Width of the window demand is counted in (a burst). Default 10 s. */
  readonly burstMs?: number | undefined;
  /** How long a burst keeps the pool sized for it. Default 5 minutes. */
  readonly idleMs?: number | undefined;
}

/** Demand is kept per second: a bounded number of buckets whatever the rate. */
const BUCKET_MS = 1000;

/** The demand a warm pool has seen, and the size it should keep from it. */
export class PoolDemand {
  readonly min: number;
  readonly max: number;
  readonly #burstMs: number;
  readonly #idleMs: number;
  /** Demand per second, oldest first: [bucket start, count]. */
  readonly #buckets: Array<[number, number]> = [];

  constructor(s: PoolSizing) {
    this.min = Math.max(0, Math.floor(s.min));
    this.max = Math.max(this.min, Math.floor(s.max));
    this.#burstMs = Math.max(BUCKET_MS, s.burstMs ?? 10_000);
    this.#idleMs = Math.max(this.#burstMs, s.idleMs ?? 300_000);
  }

  /** `n` sessions that the pool could have served were asked for at `now` (taken or not). */
  record(now: number, n = 1): void {
    if (n <= 0) return;
    const start = now - (now % BUCKET_MS);
    const last = this.#buckets.at(-1);
    if (last !== undefined && last[0] === start) last[1] += n;
    else this.#buckets.push([start, n]);
    this.#prune(now);
  }

  /** The largest demand in any `burstMs` window of the last `idleMs` (0 when none). */
  peak(now: number): number {
    this.#prune(now);
    let peak = 0;
    let sum = 0;
    let from = 0;
    for (const [start, n] of this.#buckets) {
      sum += n;
      while (this.#buckets[from]![0] <= start - this.#burstMs) {
        sum -= this.#buckets[from]![1];
        from++;
      }
      peak = Math.max(peak, sum);
    }
    return peak;
  }

  /** Containers the pool should hold ready at `now`. */
  target(now: number): number {
    return Math.min(this.max, Math.max(this.min, this.peak(now)));
  }

  /** Whether any demand is still remembered (the pool is above its minimum for a reason). */
  active(now: number): boolean {
    this.#prune(now);
    return this.#buckets.length > 0;
  }

  #prune(now: number): void {
    let drop = 0;
    while (drop < this.#buckets.length && this.#buckets[drop]![0] <= now - this.#idleMs) drop++;
    if (drop > 0) this.#buckets.splice(0, drop);
  }
}

/**
 * How many surplus containers to remove in one step when the pool holds `ready` and wants
 * `target`: a quarter of the surplus, at least one, so a pool shrinks smoothly rather than
 * dropping everything the moment a burst is forgotten.
 */
export function shrinkStep(ready: number, target: number): number {
  const surplus = ready - target;
  return surplus <= 0 ? 0 : Math.max(1, Math.ceil(surplus / 4));
}

/**
 * Creates to start now: what the pool lacks, minus those already under way, within `parallel`
 * creates of its own at once.
 */
export function refillStep(ready: number, inFlight: number, target: number, parallel: number): number {
  return Math.max(0, Math.min(target - ready - inFlight, parallel - inFlight));
}
