/**
 * Following one process's output without a gap: history through `process/read`, then the
 * live notifications, and after every reconnect a read from the last seq applied. Per process
 * every event takes one seq, so notifications are contiguous; reads return output chunks only
 * (the seqs of exit and escalation events are skipped there, which is not a gap).
 */
import type { MethodResult, ProcessNotification } from '../../src/protocol/methods.ts';
import type { StreamName } from '../../src/protocol/common.ts';
import { fromBase64 } from './bytes.ts';

export type { StreamName };

/** What `process/read` answers (the fields used here). */
export type ReadAnswer = Pick<
  MethodResult<'process/read'>,
  | 'chunks'
  | 'nextSeq'
  | 'exited'
  | 'exitCode'
  | 'terminal'
  | 'signal'
  | 'sandboxDenied'
  | 'firstRetainedSeq'
  | 'droppedBytes'
>;

export interface ProcessEnd {
  readonly exitCode: number | null;
  readonly terminal: string | null;
  readonly signal: string | null;
  readonly sandboxDenied: boolean;
}

/** A notification about one process, flattened: its method beside its params. */
type Flat<N> = N extends { readonly method: infer M; readonly params: infer P } ? { readonly method: M } & P : never;

/** A process notification (`process/output`, `/escalated`, `/exited`, `/closed`) for this process. */
export type ProcessEvent = Flat<ProcessNotification>;

export interface StreamSink {
  output(stream: StreamName, data: Uint8Array): void;
  /** Output the server no longer retains (`--output-retention-bytes`): shown, never hidden. */
  dropped(bytes: number): void;
  escalated(reason: string): void;
  ended(end: ProcessEnd): void;
}

/** Largest read asked for (the server's retention is 1 MiB by default). */
const READ_BYTES = 1024 * 1024;
/** Bounded catch-up: reads per sync at most (each returns at least one chunk). */
const MAX_READS = 4096;

export class ProcessFollower {
  /** Highest seq applied so far. */
  lastSeq = 0;
  readonly #read: (afterSeq: number, maxBytes: number) => Promise<ReadAnswer>;
  readonly #sink: StreamSink;
  /** Notifications past `lastSeq + 1`, waiting for the gap before them to be read. */
  readonly #pending = new Map<number, ProcessEvent>();
  #syncing: Promise<void> | undefined;
  #ended = false;
  #stopped = false;

  constructor(read: (afterSeq: number, maxBytes: number) => Promise<ReadAnswer>, sink: StreamSink) {
    this.#read = read;
    this.#sink = sink;
  }

  get ended(): boolean {
    return this.#ended;
  }

  /** Stops applying anything (the view closed). */
  stop(): void {
    this.#stopped = true;
    this.#pending.clear();
  }

  /** Reads from `lastSeq` until it meets the live notifications. At the start, and after each reconnect. */
  sync(): Promise<void> {
    this.#syncing ??= this.#catchUp().finally(() => {
      this.#syncing = undefined;
      this.#drain();
    });
    return this.#syncing;
  }

  async #catchUp(): Promise<void> {
    for (let i = 0; i < MAX_READS && !this.#stopped; i++) {
      const answer = await this.#read(this.lastSeq, READ_BYTES);
      if (this.#stopped) return;
      this.#applyRead(answer);
      const firstLive = Math.min(...this.#pending.keys());
      if (answer.chunks.length === 0 || firstLive <= this.lastSeq + 1) return;
    }
  }

  #applyRead(answer: ReadAnswer): void {
    const first = answer.chunks[0];
    if (
      first !== undefined &&
      first.seq > this.lastSeq + 1 &&
      answer.firstRetainedSeq > this.lastSeq + 1 &&
      answer.droppedBytes > 0
    )
      this.#sink.dropped(answer.droppedBytes);
    for (const c of answer.chunks) {
      if (c.seq <= this.lastSeq) continue;
      this.#sink.output(c.stream, fromBase64(c.chunk));
      this.lastSeq = c.seq;
    }
    this.lastSeq = Math.max(this.lastSeq, answer.nextSeq - 1);
    if (answer.exited)
      this.#end({
        exitCode: answer.exitCode,
        terminal: answer.terminal,
        signal: answer.signal,
        sandboxDenied: answer.sandboxDenied,
      });
  }

  /** A live notification about this process. */
  notify(event: ProcessEvent): void {
    if (this.#stopped || event.seq <= this.lastSeq) return;
    this.#pending.set(event.seq, event);
    if (this.#syncing) return;
    if (event.seq === this.lastSeq + 1) this.#drain();
    // A seq past the next one means events went by unseen (a socket dropped in between): read them.
    else void this.sync().catch(() => undefined);
  }

  #drain(): void {
    for (
      let next = this.#pending.get(this.lastSeq + 1);
      next !== undefined;
      next = this.#pending.get(this.lastSeq + 1)
    ) {
      this.#pending.delete(next.seq);
      this.lastSeq = next.seq;
      this.#apply(next);
    }
    for (const seq of this.#pending.keys()) if (seq <= this.lastSeq) this.#pending.delete(seq);
  }

  #apply(event: ProcessEvent): void {
    switch (event.method) {
      case 'process/output':
        this.#sink.output(event.stream, fromBase64(event.chunk));
        return;
      case 'process/escalated':
        this.#sink.escalated(event.reason);
        return;
      case 'process/exited':
        this.#end({
          exitCode: event.exitCode,
          terminal: event.terminal,
          signal: event.signal ?? null,
          sandboxDenied: event.sandboxDenied,
        });
        return;
      case 'process/closed':
        return;
    }
  }

  #end(end: ProcessEnd): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#sink.ended(end);
  }
}
