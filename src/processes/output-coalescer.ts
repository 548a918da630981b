/**
 * How a process's output reaches its log: in chunks of at most `CHUNK_MAX_BYTES` (one seq, one
 * notification each), what arrives within one event-loop turn merged up to that size (latency
 * added: at most one turn), a bigger read split, every chunk of one stream. The bytes live in
 * recycled slabs (output-slabs.ts) until the log drops them. Its `ManagedProcess` owns one and
 * flushes it before the exit is appended.
 */
import type { StreamName } from '../backends/types.ts';
import type { OutputLog } from './output-log.ts';
import { SlabWriter } from './output-slabs.ts';

/**
 * Measured end to end (bench/compare-reference.ts; BENCH_DEBUG=1 prints the CPU a stream
 * costs): with 16 KiB a 256 MB pipe stream cost the machine 1.26-1.44 CPU-s and took
 * 0.72-0.83 s, with 64 KiB 1.59-1.64 CPU-s and 0.87-0.91 s (8 and 32 KiB in between): the
 * client's text frame then mostly fits in one socket read, and small frames pipeline.
 */
const CHUNK_MAX_BYTES = 16 * 1024;

/** Merges a process's small reads into chunks of at most 16 KiB before they enter its log. */
export class OutputCoalescer {
  readonly #log: OutputLog;
  /** Called with each chunk's size just before it is appended (the append notifies clients). */
  readonly #beforeAppend: (bytes: number) => void;
  /** What it holds untaken is not yet in the log, all of `#stream`. */
  readonly #output = new SlabWriter();
  #stream: StreamName = 'stdout';
  #scheduled: NodeJS.Immediate | undefined;

  constructor(log: OutputLog, beforeAppend: (bytes: number) => void) {
    this.#log = log;
    this.#beforeAppend = beforeAppend;
  }

  /** Queues output, merging within one loop turn; a full chunk goes to the log at once. */
  publish(stream: StreamName, data: Buffer): void {
    while (data.length > CHUNK_MAX_BYTES) {
      this.publish(stream, data.subarray(0, CHUNK_MAX_BYTES));
      data = data.subarray(CHUNK_MAX_BYTES);
    }
    const pending = this.#output.pendingBytes;
    if (pending > 0 && (stream !== this.#stream || pending + data.length > CHUNK_MAX_BYTES)) this.flush();
    this.#stream = stream;
    this.#output.append(data);
    if (this.#output.pendingBytes >= CHUNK_MAX_BYTES) this.flush();
    else this.#scheduled ??= setImmediate(() => this.flush());
  }

  /** Appends queued output to the log now (before an exit, and on each loop turn). */
  flush(): void {
    if (this.#scheduled !== undefined) {
      clearImmediate(this.#scheduled);
      this.#scheduled = undefined;
    }
    const chunk = this.#output.take();
    if (!chunk) return;
    this.#beforeAppend(chunk.data.length);
    this.#log.append({ kind: 'output', stream: this.#stream, data: chunk.data }, chunk.release);
  }

  /** No more output (the process ended, after a last flush): its current slab goes back. */
  close(): void {
    this.#output.close();
  }
}
