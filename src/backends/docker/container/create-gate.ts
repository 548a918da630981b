/**
 * Bounds the container creates one engine runs at once, with two classes: live work (a client
 * waits for the session) and background work (warm-pool refills). Live work always goes first;
 * background work takes at most `background` of the slots and only while no live work waits, so
 * a refill never delays a session someone asked for by more than the creates already under way.
 */

type Waiter = () => void;

/** Bounds one engine's container creates at once, live work always before warm-pool refills. */
export class CreateGate {
  readonly limit: number;
  readonly #background: number;
  #running = 0;
  #runningBackground = 0;
  readonly #live: Waiter[] = [];
  readonly #idle: Waiter[] = [];

  /** `limit` creates at once, `background` of them at most for refills (default half, at least one). */
  constructor(limit: number, background?: number) {
    this.limit = Math.max(1, Math.floor(limit));
    this.#background = Math.max(1, Math.min(this.limit, background ?? Math.ceil(this.limit / 2)));
  }

  /** Creates running now, and waiting (live, background). */
  get stats(): { running: number; live: number; background: number } {
    return { running: this.#running, live: this.#live.length, background: this.#idle.length };
  }

  /** Runs `work` once a slot is free; background work waits for live work. */
  async run<T>(kind: 'live' | 'background', work: () => Promise<T>): Promise<T> {
    await this.#acquire(kind);
    try {
      return await work();
    } finally {
      this.#running--;
      if (kind === 'background') this.#runningBackground--;
      this.#next();
    }
  }

  #acquire(kind: 'live' | 'background'): Promise<void> {
    if (this.#may(kind)) {
      this.#take(kind);
      return Promise.resolve();
    }
    return new Promise((resolve) => (kind === 'live' ? this.#live : this.#idle).push(resolve));
  }

  #may(kind: 'live' | 'background'): boolean {
    if (this.#running >= this.limit) return false;
    if (kind === 'live') return true;
    return this.#live.length === 0 && this.#runningBackground < this.#background;
  }

  #take(kind: 'live' | 'background'): void {
    this.#running++;
    if (kind === 'background') this.#runningBackground++;
  }

  #next(): void {
    while (this.#running < this.limit) {
      const live = this.#live.shift();
      if (live !== undefined) {
        this.#take('live');
        live();
        continue;
      }
      if (this.#idle.length === 0 || !this.#may('background')) return;
      this.#take('background');
      this.#idle.shift()!();
    }
  }
}
