/**
 * The ordered event log of one process: output chunks, escalation, exit and close, each with
 * a per-process `seq` starting at 1. Output is retained up to a byte budget (oldest chunks
 * dropped first, reported via `firstRetainedSeq`/`droppedBytes`); the exit and close events
 * are always kept so a reconnecting client learns how the process ended.
 */
import type { StreamName } from '../backends/types.ts';
import type { TerminalState } from './process-state.ts';

export type LogEvent =
  | { readonly seq: number; readonly kind: 'output'; readonly stream: StreamName; readonly data: Buffer }
  | { readonly seq: number; readonly kind: 'escalated'; readonly reason: string }
  | { readonly seq: number; readonly kind: 'exited'; readonly state: TerminalState; readonly sandboxDenied: boolean }
  | { readonly seq: number; readonly kind: 'closed' };

type Unsequenced<E> = E extends unknown ? Omit<E, 'seq'> : never;
export type NewLogEvent = Unsequenced<LogEvent>;

/** What a read of the log gives: output after the asked seq, where to go on, and what was dropped. */
export interface ReadResult {
  readonly chunks: ReadonlyArray<Extract<LogEvent, { kind: 'output' }>>;
  readonly nextSeq: number;
  readonly firstRetainedSeq: number;
  readonly droppedBytes: number;
}

/** A process's events numbered by seq, with its output retained up to a byte budget (oldest dropped first). */
export class OutputLog {
  readonly #budget: number;
  readonly #chunks: Array<Extract<LogEvent, { kind: 'output' }>> = [];
  /** Per retained chunk (same index), what frees its storage once it is dropped. */
  readonly #releases: Array<(() => void) | undefined> = [];
  #head = 0; // index of the oldest retained chunk (array compacted lazily)
  #retainedBytes = 0;
  #droppedBytes = 0;
  #nextSeq = 1;
  #exit: Extract<LogEvent, { kind: 'exited' }> | undefined;
  #closed: Extract<LogEvent, { kind: 'closed' }> | undefined;
  #escalations: Array<Extract<LogEvent, { kind: 'escalated' }>> = [];
  readonly #listeners = new Set<(event: LogEvent) => void>();
  #waiters: Array<() => void> = [];

  constructor(retentionBytes: number) {
    this.#budget = retentionBytes;
  }

  get nextSeq(): number {
    return this.#nextSeq;
  }
  get droppedBytes(): number {
    return this.#droppedBytes;
  }
  get exit(): Extract<LogEvent, { kind: 'exited' }> | undefined {
    return this.#exit;
  }
  get closed(): boolean {
    return this.#closed !== undefined;
  }
  get firstRetainedSeq(): number {
    return this.#chunks[this.#head]?.seq ?? this.#nextSeq;
  }

  /**
   * Appends an event, assigns its seq and tells every listener synchronously. `release` (output
   * only) runs when the chunk is dropped from retention: its data may be reused after that turn.
   */
  append(event: NewLogEvent, release?: () => void): LogEvent {
    const sequenced = { ...event, seq: this.#nextSeq++ } as LogEvent;
    switch (sequenced.kind) {
      case 'output':
        this.#chunks.push(sequenced);
        this.#releases.push(release);
        this.#retainedBytes += sequenced.data.length;
        this.#evict();
        break;
      case 'escalated':
        this.#escalations.push(sequenced);
        break;
      case 'exited':
        this.#exit = sequenced;
        break;
      case 'closed':
        this.#closed = sequenced;
        break;
    }
    for (const listener of this.#listeners) listener(sequenced);
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
    return sequenced;
  }

  /**
   * Recovery (a restarted server re-adopting a process): the next event gets `seq` (never
   * lower than what the log already assigned), and `bytes` count as dropped before it.
   */
  resumeAt(seq: number, droppedBytes = 0): void {
    this.#nextSeq = Math.max(this.#nextSeq, seq);
    this.#droppedBytes += droppedBytes;
  }

  #evict(): void {
    // Keep at least the newest chunk even if it alone exceeds the budget.
    while (this.#retainedBytes > this.#budget && this.#chunks.length - this.#head > 1) {
      this.#releases[this.#head]?.();
      this.#releases[this.#head] = undefined;
      const old = this.#chunks[this.#head++];
      if (!old) break;
      this.#retainedBytes -= old.data.length;
      this.#droppedBytes += old.data.length;
    }
    if (this.#head > 1024 && this.#head * 2 > this.#chunks.length) {
      this.#chunks.splice(0, this.#head);
      this.#releases.splice(0, this.#head);
      this.#head = 0;
    }
  }

  /** Output chunks with seq > afterSeq, at most `maxBytes` (but always at least one chunk). */
  read(afterSeq: number, maxBytes: number): ReadResult {
    const chunks: Array<Extract<LogEvent, { kind: 'output' }>> = [];
    let bytes = 0;
    let truncated = false;
    for (let i = this.#firstIndexAfter(afterSeq); i < this.#chunks.length; i++) {
      const chunk = this.#chunks[i];
      if (!chunk) break;
      if (chunks.length > 0 && bytes + chunk.data.length > maxBytes) {
        truncated = true;
        break;
      }
      chunks.push(chunk);
      bytes += chunk.data.length;
    }
    const last = chunks[chunks.length - 1];
    const nextSeq = truncated && last ? last.seq + 1 : this.#nextSeq;
    return { chunks, nextSeq, firstRetainedSeq: this.firstRetainedSeq, droppedBytes: this.#droppedBytes };
  }

  #firstIndexAfter(afterSeq: number): number {
    let lo = this.#head;
    let hi = this.#chunks.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.#chunks[mid]?.seq ?? Infinity) <= afterSeq) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Every retained event with seq > afterSeq, in order (for replay to a resumed client). */
  eventsAfter(afterSeq: number): LogEvent[] {
    const events: LogEvent[] = [
      ...this.#chunks.slice(this.#firstIndexAfter(afterSeq)),
      ...this.#escalations.filter((e) => e.seq > afterSeq),
    ];
    if (this.#exit && this.#exit.seq > afterSeq) events.push(this.#exit);
    if (this.#closed && this.#closed.seq > afterSeq) events.push(this.#closed);
    return events.sort((a, b) => a.seq - b.seq);
  }

  /** Resolves when an event with seq > afterSeq exists, or after `waitMs`, or on abort. */
  waitFor(afterSeq: number, waitMs: number, signal?: AbortSignal): Promise<void> {
    if (this.#nextSeq - 1 > afterSeq || waitMs <= 0 || signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        this.#waiters = this.#waiters.filter((w) => w !== done);
        resolve();
      };
      const timer = setTimeout(done, waitMs);
      signal?.addEventListener('abort', done, { once: true });
      this.#waiters.push(done);
    });
  }

  subscribe(listener: (event: LogEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}
