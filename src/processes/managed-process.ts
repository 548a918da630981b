/**
 * One client-visible process and the one owner of its state machine (docs/architecture.md,
 * "Who owns which state"): starting, then held (an attempt inside the early-exit window, its
 * output kept back) or running, possibly retrying (a denied attempt replaced by an unsandboxed
 * one under the same process id), and finally ended in a terminal state (exited, signaled,
 * timed-out, terminated, lost). Everything else calls the transitions below; policy only
 * decides which one (src/policy/), the launcher carries it out (launcher.ts).
 */
import type {
  BackendExit,
  BackendProcess,
  ProcessSink,
  SandboxType,
  SignalName,
  SpawnMode,
  StreamName,
  TerminalSize,
} from '../backends/types.ts';
import type { ProcessId } from '../ids.ts';
import type { WriteStatus } from '../protocol/index.ts';
import { Attempt } from './attempt.ts';
import { OutputCoalescer } from './output-coalescer.ts';
import { OutputLog } from './output-log.ts';
import { terminalState, type ProcessState, type ServerEnd, type TerminalState } from './process-state.ts';

const WRITE_ID_MEMORY = 1024;

/** What a process was started as: fixed for its life, whatever attempts it takes. */
export interface ProcessSpec {
  readonly id: ProcessId;
  readonly argv: readonly string[];
  readonly cwd: string;
  readonly mode: SpawnMode;
  readonly timeoutMs?: number | undefined;
}

/** Where the process is; `ended` carries the terminal state reported on the wire. */
type Phase =
  | { readonly kind: 'starting' | 'held' | 'running' | 'retrying' }
  | { readonly kind: 'ended'; readonly state: TerminalState };

/** One process as clients see it: the one owner of its state machine, its attempts and its output log. */
export class ManagedProcess {
  readonly spec: ProcessSpec;
  readonly log: OutputLog;
  readonly createdAt: number;
  #phase: Phase = { kind: 'starting' };
  #attempt: Attempt | undefined;
  #lastUsed = Date.now();
  #endedAt: number | undefined;
  #sandboxType: SandboxType = 'none';
  #sandboxDenied = false;
  #stdinOpen: boolean;
  /** Set when the server ends the process itself; decides the terminal state of the exit. */
  #pendingEnd: ServerEnd | undefined;
  readonly #holdLimit: number;
  readonly #writeIds = new Set<string>();
  #outputPaused = false;
  readonly #timers = new Set<NodeJS.Timeout>();
  readonly #onTerminal: ((p: ManagedProcess) => void) | undefined;
  /** Output on its way to the log (chunked, merged within a loop turn). */
  readonly #output: OutputCoalescer;
  /** Bytes of the current attempt's output in the log: what `acknowledge` tells its backend. */
  #attemptBytes = 0;

  constructor(
    spec: ProcessSpec,
    retentionBytes: number,
    onTerminal?: (p: ManagedProcess) => void,
    createdAt = Date.now(),
  ) {
    this.spec = spec;
    this.createdAt = createdAt;
    this.log = new OutputLog(retentionBytes);
    this.#holdLimit = retentionBytes;
    this.#stdinOpen = spec.mode !== 'pipe-no-stdin';
    this.#onTerminal = onTerminal;
    this.#output = new OutputCoalescer(this.log, (bytes) => {
      this.#attemptBytes += bytes;
      // Before the append (which notifies clients): a restarted server must never know less
      // than a client was told.
      this.#attempt?.process?.acknowledge?.(this.log.nextSeq, this.#attemptBytes);
    });
  }

  get id(): ProcessId {
    return this.spec.id;
  }

  /** The state clients see: held and retrying are `running` to them. */
  get state(): ProcessState {
    switch (this.#phase.kind) {
      case 'starting':
        return { status: 'starting' };
      case 'ended':
        return this.#phase.state;
      default:
        return { status: 'running' };
    }
  }

  get ended(): boolean {
    return this.#phase.kind === 'ended';
  }

  get sandboxType(): SandboxType {
    return this.#sandboxType;
  }

  /** The process ended with a sandbox denial reported to the client (not retried). */
  get sandboxDenied(): boolean {
    return this.#sandboxDenied;
  }

  /** The server asked it to end (terminate, timeout): a denial is then reported, not retried. */
  get endRequested(): boolean {
    return this.#pendingEnd !== undefined;
  }

  /** When the process reached its terminal state (ms since the epoch). */
  get endedAt(): number | undefined {
    return this.#endedAt;
  }

  get lastUsed(): number {
    return this.#lastUsed;
  }

  /** A client used the process (pruning spares the recently used). */
  touch(): void {
    this.#lastUsed = Date.now();
  }

  /** Output flow control from the attached client (see ProcessTable.setOutputPaused). */
  setOutputPaused(paused: boolean): void {
    this.#outputPaused = paused;
    const process = this.#attempt?.process;
    if (!process) return;
    if (paused) process.pauseOutput();
    else process.resumeOutput();
  }

  // ---- transitions ----------------------------------------------------------------------

  /** A new attempt (the first, or the retry) and the sink its backend process reports to; `holding`: sandboxed, inside the window. */
  beginAttempt(holding: boolean): { attempt: Attempt; sink: ProcessSink } {
    const attempt = new Attempt(holding);
    this.#attempt = attempt;
    this.#attemptBytes = 0;
    this.#stdinOpen = this.spec.mode !== 'pipe-no-stdin';
    const sink: ProcessSink = {
      output: (stream, data) => {
        if (attempt.discarded || data.length === 0) return;
        if (!attempt.holding) return this.#output.publish(stream, data);
        // Holding is bounded: an attempt that prints more than the budget inside the window
        // evidently runs, so its output is published (nothing lost) and it will not be retried.
        if (attempt.hold(stream, data) > this.#holdLimit) this.release(attempt);
      },
      exit: (result) => {
        if (attempt.markExited(result) && !attempt.holding && !attempt.discarded) this.#finish(result, false);
      },
    };
    return { attempt, sink };
  }

  /** starting/retrying -> held or running: the attempt's backend process runs. */
  attemptRunning(attempt: Attempt, process: BackendProcess): void {
    attempt.bind(process);
    if (this.#outputPaused) process.pauseOutput();
    this.#sandboxType = process.sandboxType;
    if (this.#phase.kind === 'ended') return;
    this.#phase = { kind: attempt.holding ? 'held' : 'running' };
    // Nothing to classify without a sandbox: the window ends at once.
    if (process.sandboxType === 'none') this.release(attempt);
  }

  /** held -> running (or ended, if it exited in the window): publishes what the attempt held. */
  release(attempt: Attempt, sandboxDenied = false): void {
    if (!attempt.holding) return;
    for (const chunk of attempt.stopHolding()) this.#output.publish(chunk.stream, chunk.data);
    if (this.#phase.kind === 'held') this.#phase = { kind: 'running' };
    if (attempt.exit) this.#finish(attempt.exit, sandboxDenied);
  }

  /** held -> retrying: drops the denied attempt (clients never see its output) and says so. */
  retry(attempt: Attempt, reason: string): void {
    attempt.discard();
    attempt.process?.dispose?.();
    this.#phase = { kind: 'retrying' };
    this.log.append({ kind: 'escalated', reason });
  }

  /**
   * Recovery, starting -> running: makes this (new) process the continuation of one a previous
   * server started. `chunks` are the output the backend kept, under the seqs they had (those
   * without one were never published and get the next seqs); `process` goes on with the
   * returned sink.
   */
  adopt(
    r: {
      readonly seqBase: number;
      readonly droppedBytes: number;
      readonly endOffset: number;
      readonly sandboxType: SandboxType;
      readonly chunks: ReadonlyArray<{
        readonly stream: StreamName;
        readonly data: Buffer;
        readonly seq?: number | undefined;
      }>;
    },
    process: BackendProcess,
  ): ProcessSink {
    this.log.resumeAt(r.seqBase, r.droppedBytes);
    for (const c of r.chunks) {
      if (c.seq !== undefined) this.log.resumeAt(c.seq);
      this.log.append({ kind: 'output', stream: c.stream, data: Buffer.from(c.data) });
    }
    const { attempt, sink } = this.beginAttempt(false);
    attempt.bind(process);
    this.#attemptBytes = r.endOffset;
    this.#sandboxType = r.sandboxType;
    this.#phase = { kind: 'running' };
    return sink;
  }

  /** The engine no longer needs the process (pruned, or expired after its end): its backend may drop its record. */
  dispose(): void {
    this.#attempt?.process?.dispose?.();
  }

  /** -> ended lost: the process never got (or lost) its backend attempt. */
  fail(reason: string): void {
    this.#finish({ kind: 'lost', reason }, false);
  }

  /** -> ended: records the terminal state, appends `exited` then `closed` (backends deliver exit after all output). */
  #finish(exit: BackendExit, sandboxDenied: boolean): void {
    if (this.#phase.kind === 'ended') return;
    this.#output.flush();
    this.clearTimers();
    const state = terminalState(exit, this.#pendingEnd);
    this.#phase = { kind: 'ended', state };
    this.#endedAt = Date.now();
    this.#sandboxDenied = sandboxDenied;
    this.#stdinOpen = false;
    this.#output.close();
    this.log.append({ kind: 'exited', state, sandboxDenied });
    this.log.append({ kind: 'closed' });
    this.#onTerminal?.(this);
  }

  // ---- what clients do with a process ---------------------------------------------------

  /** `process/write`: `writeId` makes a retried write idempotent; `stdinBytes`: what reached stdin. */
  async write(
    chunk: Buffer,
    writeId: string | undefined,
  ): Promise<{ status: Exclude<WriteStatus, 'unknownProcess'>; stdinBytes: number }> {
    this.touch();
    if (this.#phase.kind === 'starting') return { status: 'starting', stdinBytes: 0 };
    if (writeId !== undefined && !this.#rememberWrite(writeId)) return { status: 'accepted', stdinBytes: 0 };
    if (this.ended) return { status: 'stdinClosed', stdinBytes: 0 };
    if (!this.#stdinOpen) {
      // Codex: exactly "\u0003" to a pipe process without stdin is an interrupt.
      if (this.spec.mode !== 'pty' && chunk.length === 1 && chunk[0] === 3) {
        await this.signal('SIGINT');
        return { status: 'accepted', stdinBytes: 0 };
      }
      return { status: 'stdinClosed', stdinBytes: 0 };
    }
    await this.#attempt?.process?.write(chunk);
    return { status: 'accepted', stdinBytes: chunk.length };
  }

  /** Remembers a writeId; false when it was seen before (the write is a retry). */
  #rememberWrite(writeId: string): boolean {
    if (this.#writeIds.has(writeId)) return false;
    this.#writeIds.add(writeId);
    if (this.#writeIds.size > WRITE_ID_MEMORY) {
      const oldest = this.#writeIds.values().next().value;
      if (oldest !== undefined) this.#writeIds.delete(oldest);
    }
    return true;
  }

  async closeStdin(): Promise<void> {
    this.touch();
    if (!this.#stdinOpen) return;
    this.#stdinOpen = false;
    await this.#attempt?.process?.closeStdin();
  }

  async resize(size: TerminalSize): Promise<void> {
    this.touch();
    if (!this.ended) await this.#attempt?.process?.resize(size);
  }

  async signal(signal: SignalName): Promise<void> {
    await this.#attempt?.process?.signal(signal);
  }

  /**
   * SIGTERM to the group, SIGKILL after `graceMs` if still running. `reason` decides how the
   * exit is reported. Resolves once the signal is sent (not when the process is gone).
   */
  async end(reason: ServerEnd, graceMs: number): Promise<void> {
    if (this.ended) return;
    this.#pendingEnd ??= reason;
    const attempt = this.#attempt;
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
