/**
 * One client-visible process: its state machine, its event log, and the backend attempt(s)
 * behind it. A denied sandboxed attempt may be replaced by an unsandboxed retry under the
 * same process id; the attempt whose output is being held back is the only one that can be
 * discarded, so clients never see output of an attempt that was retried.
 */
import { StringDecoder } from 'node:string_decoder';
import type { BackendExit, BackendProcess, ProcessSink, SandboxType, SignalName, SpawnMode, StreamName } from '../backends/types.ts';
import type { ProcessId } from '../ids.ts';
import { OutputLog } from './output-log.ts';
import { SlabWriter } from './output-slabs.ts';
import { isTerminal, type ProcessState, type TerminalState } from './process-state.ts';

const WRITE_ID_MEMORY = 1024;
/**
 * Output is published in chunks of at most this size (one seq, one notification each): what
 * arrives within one event-loop turn is merged up to it (latency added: at most one turn), a
 * bigger read is split. Measured end to end (bench/compare-reference.ts; BENCH_DEBUG=1 prints
 * the CPU a stream costs): with 16 KiB a 256 MB pipe stream cost the machine 1.26-1.44 CPU-s
 * and took 0.72-0.83 s, with 64 KiB 1.59-1.64 CPU-s and 0.87-0.91 s (8 and 32 KiB in between):
 * the client's text frame then mostly fits in one socket read, and small frames pipeline.
 */
const CHUNK_MAX_BYTES = 16 * 1024;

export interface ProcessSpec {
  readonly id: ProcessId;
  readonly argv: readonly string[];
  readonly cwd: string;
  readonly mode: SpawnMode;
  readonly timeoutMs?: number | undefined;
}

/** One backend attempt. Output is held while `holding` (inside the early-exit window). */
export class Attempt {
  process: BackendProcess | undefined;
  holding: boolean;
  discarded = false;
  exit: BackendExit | undefined;
  readonly held: Array<{ stream: StreamName; data: Buffer }> = [];
  heldBytes = 0;
  readonly exited: Promise<BackendExit>;
  #resolveExit!: (exit: BackendExit) => void;

  constructor(holding: boolean) {
    this.holding = holding;
    this.exited = new Promise((resolve) => (this.#resolveExit = resolve));
  }

  markExited(exit: BackendExit): void {
    this.exit = exit;
    this.#resolveExit(exit);
  }

  /** Text of the held output, for the denial classifier. */
  heldText(): string {
    const decoder = new StringDecoder('utf8');
    return this.held.map((c) => decoder.write(c.data)).join('') + decoder.end();
  }
}

export class ManagedProcess {
  readonly spec: ProcessSpec;
  readonly log: OutputLog;
  readonly createdAt: number;
  /** When the process reached its terminal state (ms since the epoch). */
  endedAt: number | undefined;
  lastUsed = Date.now();
  state: ProcessState = { status: 'starting' };
  sandboxType: SandboxType = 'none';
  sandboxDenied = false;
  stdinOpen: boolean;
  /** Set when the server ends the process itself; decides the terminal state of the exit. */
  pendingEnd: 'timed-out' | 'terminated' | undefined;
  attempt: Attempt | undefined;
  readonly #holdLimit: number;
  readonly #writeIds = new Set<string>();
  #outputPaused = false;
  readonly #timers = new Set<NodeJS.Timeout>();
  #onTerminal: ((p: ManagedProcess) => void) | undefined;
  /** Output storage; what it holds untaken is not yet in the log (coalescing), all of one stream. */
  readonly #output = new SlabWriter();
  #pendingStream: StreamName = 'stdout';
  #flushScheduled: NodeJS.Immediate | undefined;
  /** Bytes of the current attempt's output in the log: what `acknowledge` tells its backend. */
  #attemptBytes = 0;

  constructor(spec: ProcessSpec, retentionBytes: number, onTerminal?: (p: ManagedProcess) => void, createdAt = Date.now()) {
    this.spec = spec;
    this.createdAt = createdAt;
    this.log = new OutputLog(retentionBytes);
    this.#holdLimit = retentionBytes;
    this.stdinOpen = spec.mode !== 'pipe-no-stdin';
    this.#onTerminal = onTerminal;
  }

  get id(): ProcessId {
    return this.spec.id;
  }

  /** Output flow control from the attached client (see ProcessTable.setOutputPaused). */
  setOutputPaused(paused: boolean): void {
    this.#outputPaused = paused;
    const process = this.attempt?.process;
    if (!process) return;
    if (paused) process.pauseOutput();
    else process.resumeOutput();
  }

  get outputPaused(): boolean {
    return this.#outputPaused;
  }

  get running(): boolean {
    return this.state.status === 'running';
  }

  /** Starts a new attempt and returns the sink its backend process reports to. */
  beginAttempt(holding: boolean): { attempt: Attempt; sink: ProcessSink } {
    const attempt = new Attempt(holding);
    this.attempt = attempt;
    this.#attemptBytes = 0;
    this.stdinOpen = this.spec.mode !== 'pipe-no-stdin';
    const sink: ProcessSink = {
      output: (stream, data) => {
        if (attempt.discarded || data.length === 0) return;
        if (!attempt.holding) {
          this.#publish(stream, data);
          return;
        }
        attempt.held.push({ stream, data: Buffer.from(data) }); // `data` is the backend's to reuse
        attempt.heldBytes += data.length;
        // Holding is bounded: an attempt that prints more than the budget inside the window
        // evidently runs, so its output is published (nothing lost) and it will not be retried.
        if (attempt.heldBytes > this.#holdLimit) this.release(attempt);
      },
      exit: (result) => {
        if (attempt.exit) return;
        attempt.markExited(result);
        if (!attempt.holding && !attempt.discarded) this.finish(result, false);
      },
    };
    return { attempt, sink };
  }

  /** Queues output for the log in chunks of at most CHUNK_MAX_BYTES, merging within one loop turn. */
  #publish(stream: StreamName, data: Buffer): void {
    while (data.length > CHUNK_MAX_BYTES) {
      this.#publish(stream, data.subarray(0, CHUNK_MAX_BYTES));
      data = data.subarray(CHUNK_MAX_BYTES);
    }
    const pending = this.#output.pendingBytes;
    if (pending > 0 && (stream !== this.#pendingStream || pending + data.length > CHUNK_MAX_BYTES)) this.flushOutput();
    this.#pendingStream = stream;
    this.#output.append(data);
    if (this.#output.pendingBytes >= CHUNK_MAX_BYTES) this.flushOutput();
    else this.#flushScheduled ??= setImmediate(() => this.flushOutput());
  }

  /** Appends queued output to the log now (before an exit, and on each loop turn). */
  flushOutput(): void {
    if (this.#flushScheduled !== undefined) {
      clearImmediate(this.#flushScheduled);
      this.#flushScheduled = undefined;
    }
    const chunk = this.#output.take();
    if (!chunk) return;
    this.#attemptBytes += chunk.data.length;
    // Before the append (which notifies clients): a restarted server must never know less
    // than a client was told.
    this.attempt?.process?.acknowledge?.(this.log.nextSeq, this.#attemptBytes);
    this.log.append({ kind: 'output', stream: this.#pendingStream, data: chunk.data }, chunk.release);
  }

  /**
   * Recovery: makes this (new) process the continuation of one a previous server started.
   * `chunks` are the output the backend kept, under the seqs they had (those without one were
   * never published and get the next seqs); `process` goes on with the returned sink.
   */
  adopt(r: { readonly seqBase: number; readonly droppedBytes: number; readonly endOffset: number; readonly sandboxType: SandboxType; readonly chunks: ReadonlyArray<{ readonly stream: StreamName; readonly data: Buffer; readonly seq?: number | undefined }> }, process: BackendProcess): ProcessSink {
    this.log.resumeAt(r.seqBase, r.droppedBytes);
    for (const c of r.chunks) {
      if (c.seq !== undefined) this.log.resumeAt(c.seq);
      this.log.append({ kind: 'output', stream: c.stream, data: Buffer.from(c.data) });
    }
    const { attempt, sink } = this.beginAttempt(false);
    attempt.process = process;
    this.#attemptBytes = r.endOffset;
    this.sandboxType = r.sandboxType;
    this.state = { status: 'running' };
    return sink;
  }

  /** Ends the window of `attempt`: publishes what it held and, if it already exited, the exit. */
  release(attempt: Attempt, sandboxDenied = false): void {
    if (!attempt.holding) return;
    attempt.holding = false;
    for (const chunk of attempt.held.splice(0)) this.#publish(chunk.stream, chunk.data);
    attempt.heldBytes = 0;
    if (attempt.exit) this.finish(attempt.exit, sandboxDenied);
  }

  /** Drops an attempt that was classified as denied and is about to be retried. */
  discard(attempt: Attempt): void {
    attempt.discarded = true;
    attempt.holding = false;
    attempt.held.length = 0;
    attempt.heldBytes = 0;
  }

  /** Records the terminal state, appends `exited` then `closed` (backends deliver exit after all output). */
  finish(exit: BackendExit, sandboxDenied: boolean): void {
    if (isTerminal(this.state)) return;
    this.flushOutput();
    this.clearTimers();
    const state = this.#terminalState(exit);
    this.state = state;
    this.endedAt = Date.now();
    this.sandboxDenied = sandboxDenied;
    this.stdinOpen = false;
    this.#output.close();
    this.log.append({ kind: 'exited', state, sandboxDenied });
    this.log.append({ kind: 'closed' });
    this.#onTerminal?.(this);
  }

  /** Ends a process that never got (or lost) its backend attempt. */
  fail(reason: string): void {
    this.finish({ kind: 'lost', reason }, false);
  }

  #terminalState(exit: BackendExit): TerminalState {
    if (exit.kind === 'lost') return { status: 'lost', exitCode: -1, reason: exit.reason };
    if (this.pendingEnd === 'timed-out') return { status: 'timed-out', exitCode: 124 };
    if (exit.kind === 'signaled') {
      const exitCode = 128 + exit.signo;
      return this.pendingEnd === 'terminated' ? { status: 'terminated', exitCode, signal: exit.signal } : { status: 'signaled', exitCode, signal: exit.signal };
    }
    if (this.pendingEnd === 'terminated') return { status: 'terminated', exitCode: exit.code, signal: 'SIGTERM' };
    return { status: 'exited', exitCode: exit.code };
  }

  /** Remembers a writeId; false when it was seen before (the write is a retry). */
  rememberWrite(writeId: string): boolean {
    if (this.#writeIds.has(writeId)) return false;
    this.#writeIds.add(writeId);
    if (this.#writeIds.size > WRITE_ID_MEMORY) {
      const oldest = this.#writeIds.values().next().value;
      if (oldest !== undefined) this.#writeIds.delete(oldest);
    }
    return true;
  }

  async signal(signal: SignalName): Promise<void> {
    await this.attempt?.process?.signal(signal);
  }

  /**
   * SIGTERM to the group, SIGKILL after `graceMs` if still running. `reason` decides how the
   * exit is reported. Resolves once the signal is sent (not when the process is gone).
   */
  async end(reason: 'timed-out' | 'terminated', graceMs: number): Promise<void> {
    if (isTerminal(this.state)) return;
    this.pendingEnd ??= reason;
    const attempt = this.attempt;
    if (!attempt?.process) return;
    // Not one of #timers: the group may outlive its leader (a child trapping SIGTERM), so the
    // SIGKILL goes to the group even after the exit has been recorded.
    setTimeout(() => void attempt.process?.signal('SIGKILL').catch(() => undefined), graceMs).unref();
    await attempt.process.signal('SIGTERM');
  }

  addTimer(fn: () => void, ms: number): void {
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      fn();
    }, ms);
    timer.unref();
    this.#timers.add(timer);
  }

  clearTimers(): void {
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
  }
}
