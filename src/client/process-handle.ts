/**
 * A running (or ended) process as the SDK shows it: ordered output with per-stream UTF-8
 * decoding (a character split across chunks is never garbled; decoders are flushed at the
 * end), `wait()`, stdin, resize, signals. Events are applied by `seq`, so after a resume the
 * gap filled by `process/read` and the live notifications never deliver a byte twice; what the
 * server no longer retained when the gap was read is counted (`droppedBytes`), never skipped
 * silently.
 */
import { randomUUID } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import type { ProcessId } from '../ids.ts';
import type {
  MethodName,
  MethodParams,
  MethodResult,
  ProcessNotification,
  SignalName,
  StreamName,
} from '../protocol/index.ts';
import { type BinaryOutputParams, rpcErrorOf } from './rpc-connection.ts';
import { CommandExitError, HandleDisconnectedError, StdinClosedError, WaitTimeoutError } from './errors.ts';
import type { ExecResult } from './exec-result.ts';

export type { StreamName } from '../protocol/index.ts';

/** A notification about one process, as the handle applies it (output as base64 or as bytes). */
export type ProcessEvent =
  | ProcessNotification
  | { readonly method: 'process/output'; readonly params: BinaryOutputParams };

/** One chunk of a process's output, as bytes and as text decoded across chunk boundaries. */
export interface OutputChunk {
  readonly stream: StreamName;
  readonly seq: number;
  readonly data: Buffer;
  /** `data` decoded as UTF-8, with incomplete trailing sequences carried to the next chunk. */
  readonly text: string;
}

export type { ExecResult } from './exec-result.ts';

/** What the handle needs from its client. */
export interface HandleTransport {
  request<M extends MethodName>(method: M, params: MethodParams<M>): Promise<MethodResult<M>>;
}

/** Bound of the output kept for a first `onOutput` listener that comes late. */
const UNHEARD_MAX_BYTES = 1024 * 1024;

/** The longest delay `setTimeout` honours (a longer one fires at once). */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

interface Waiter {
  resolve(result: ExecResult): void;
  reject(err: Error): void;
}

interface ExitInfo {
  exitCode: number;
  terminal: string;
  signal?: string | undefined;
  sandboxDenied: boolean;
}

/** A running or ended command: its output in `seq` order, `wait()`, stdin, resize and signals. */
export class ExecHandle {
  readonly processId: ProcessId;
  readonly argv: readonly string[];
  readonly #transport: () => HandleTransport;
  readonly #check: boolean;
  readonly #collect: boolean;
  readonly #decoders = new Map<StreamName, StringDecoder>();
  readonly #text: Record<StreamName, string[]> = { stdout: [], stderr: [], pty: [] };
  readonly #listeners = new Set<(chunk: OutputChunk) => void>();
  /** Output before the first listener (a fast command's output can beat `exec()`'s return). */
  #unheard: OutputChunk[] | undefined = [];
  #unheardBytes = 0;
  readonly #endListeners = new Set<(result: ExecResult) => void>();
  #lastSeq: number;
  /** Output bytes applied: what the server's `droppedBytes` is measured against. */
  #receivedBytes = 0;
  #droppedBytes = 0;
  #exit: ExitInfo | undefined;
  #result: ExecResult | undefined;
  readonly #waiters = new Set<Waiter>();
  /** Set while the client's connection is gone for good: `wait()` rejects with it. */
  #failure: Error | undefined;
  /** Set by `disconnect()`: nothing reaches the handle any more, `wait()` rejects with it. */
  #detached: HandleDisconnectedError | undefined;
  /** Tells the client to stop routing this process's events here (`disconnect()`). */
  readonly #release: (() => void) | undefined;
  /** While a resume fills the gap, live events wait here. */
  #held: ProcessEvent[] | undefined;

  constructor(
    processId: ProcessId,
    argv: readonly string[],
    transport: () => HandleTransport,
    opts: {
      check?: boolean | undefined;
      collect?: boolean | undefined;
      afterSeq?: number | undefined;
      release?: (() => void) | undefined;
    } = {},
  ) {
    this.processId = processId;
    this.argv = argv;
    this.#transport = transport;
    this.#check = opts.check ?? true;
    this.#collect = opts.collect ?? true;
    this.#lastSeq = opts.afterSeq ?? 0;
    this.#release = opts.release;
  }

  /** Seq of the last event applied. */
  get lastSeq(): number {
    return this.#lastSeq;
  }

  get done(): boolean {
    return this.#result !== undefined;
  }

  /**
   * Bytes of this process's output that never arrived: the server no longer retained them
   * (`--output-retention-bytes`) when a resume read the gap. 0 normally; also in the result.
   */
  get droppedBytes(): number {
    return this.#droppedBytes;
  }

  /**
   * Calls `cb` for every output chunk from now on, in order. The first listener also gets, at
   * once, what arrived before any listener (up to `UNHEARD_MAX_BYTES`, the oldest dropped first),
   * so output printed before `exec()` returned is not lost. Returns an unsubscribe function.
   */
  onOutput(cb: (chunk: OutputChunk) => void): () => void {
    this.#listeners.add(cb);
    const unheard = this.#unheard;
    this.#unheard = undefined;
    for (const chunk of unheard ?? []) cb(chunk);
    return () => this.#listeners.delete(cb);
  }

  onExit(cb: (result: ExecResult) => void): () => void {
    if (this.#result) cb(this.#result);
    else this.#endListeners.add(cb);
    return () => this.#endListeners.delete(cb);
  }

  /**
   * The result once the process ended and its output closed; throws `CommandExitError` on a
   * non-zero exit when `check` (default). With `timeoutMs`, rejects with `WaitTimeoutError`
   * when the process has not ended by then, leaving it running (`wait()` again, or `kill()`).
   * Rejects with `ExecServerConnectionError` when the connection is gone for good (closed with
   * no automatic resume, or its retries ran out); a later `reconnect()` resumes the handle, and
   * `wait()` can be called again. Rejects with `HandleDisconnectedError` after `disconnect()`.
   */
  async wait(opts: { check?: boolean; timeoutMs?: number } = {}): Promise<ExecResult> {
    const { timeoutMs } = opts;
    if (timeoutMs !== undefined && !(Number.isFinite(timeoutMs) && timeoutMs >= 0 && timeoutMs <= MAX_TIMEOUT_MS))
      throw new RangeError(`timeoutMs must be a number of milliseconds from 0 to ${MAX_TIMEOUT_MS}, got ${timeoutMs}`);
    const result = this.#result ?? (await this.#ended(timeoutMs));
    if ((opts.check ?? this.#check) && result.exitCode !== 0) throw new CommandExitError(result);
    return result;
  }

  #ended(timeoutMs: number | undefined): Promise<ExecResult> {
    let timer: NodeJS.Timeout | undefined;
    return new Promise<ExecResult>((resolve, reject) => {
      const failure = this.#detached ?? this.#failure;
      if (failure) return reject(failure);
      const waiter: Waiter = { resolve, reject };
      this.#waiters.add(waiter);
      if (timeoutMs === undefined) return;
      timer = setTimeout(() => {
        this.#waiters.delete(waiter);
        reject(new WaitTimeoutError(this.processId, timeoutMs));
      }, timeoutMs);
    }).finally(() => clearTimeout(timer));
  }

  /**
   * Stops listening without ending the process: no output or exit reaches this handle any more
   * (its listeners are dropped), its `wait()`s reject with `HandleDisconnectedError`; `sendStdin`,
   * `kill` and the like still act. `client.attach(processId)` (`afterSeq: lastSeq` skips what
   * this handle saw) listens again. A handle whose process already ended keeps its result.
   */
  disconnect(): void {
    if (this.#result || this.#detached) return;
    const err = new HandleDisconnectedError(this.processId);
    this.#detached = err;
    this.#held = undefined;
    this.#unheard = undefined;
    this.#listeners.clear();
    this.#endListeners.clear();
    this.#release?.();
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const w of waiters) w.reject(err);
  }

  /**
   * Writes to stdin (keystrokes on a terminal). Never drops input silently: a closed stdin
   * (after `closeStdin`, after the end, or started without `stdin: 'pipe'`) rejects with
   * `StdinClosedError`; a process the server does not know, or one still waiting for its
   * approval, rejects with `RpcError` (`EXEC_ERR_PROCESS_NOT_FOUND`, `EXEC_ERR_PROCESS_STARTING`).
   */
  async sendStdin(data: string | Uint8Array): Promise<void> {
    const chunk = Buffer.from(typeof data === 'string' ? Buffer.from(data, 'utf8') : data).toString('base64');
    const { status } = await this.#transport().request('process/write', {
      processId: this.processId,
      chunk,
      writeId: randomUUID(),
    });
    if (status === 'accepted') return;
    if (status === 'stdinClosed') throw new StdinClosedError(this.processId);
    // What the other process methods get from the server in these states.
    throw status === 'starting'
      ? rpcErrorOf('EXEC_ERR_PROCESS_STARTING', `process id ${this.processId} is starting`)
      : rpcErrorOf('EXEC_ERR_PROCESS_NOT_FOUND', `unknown process id ${this.processId}`);
  }

  async closeStdin(): Promise<void> {
    await this.#transport().request('process/closeStdin', { processId: this.processId });
  }

  async resize(cols: number, rows: number): Promise<void> {
    await this.#transport().request('process/resize', { processId: this.processId, cols, rows });
  }

  /** No signal: terminate (SIGTERM, SIGKILL after the server's grace). Else that signal to the process group. */
  async kill(signal?: SignalName | 'interrupt'): Promise<void> {
    if (signal === undefined) await this.#transport().request('process/terminate', { processId: this.processId });
    else await this.#transport().request('process/signal', { processId: this.processId, signal });
  }

  /** @internal A `process/*` notification for this process. */
  _notify(event: ProcessEvent): void {
    if (this.#detached) return;
    if (this.#held) {
      this.#held.push(event);
      return;
    }
    this.#apply(event);
  }

  #apply(event: ProcessEvent): void {
    if (this.#detached) return;
    const { seq } = event.params;
    if (seq <= this.#lastSeq) return;
    this.#lastSeq = seq;
    switch (event.method) {
      case 'process/output': {
        const p = event.params;
        // Bytes as they are from a binary frame (binary-output.ts), else the JSON's base64 chunk.
        this.#output(p.stream, seq, 'data' in p ? p.data : Buffer.from(p.chunk, 'base64'));
        break;
      }
      case 'process/exited': {
        const { exitCode, terminal, signal, sandboxDenied } = event.params;
        this.#exit = { exitCode, terminal, signal, sandboxDenied };
        break;
      }
      case 'process/closed':
        this.#finish();
        break;
      case 'process/escalated':
        break;
    }
  }

  #output(stream: StreamName, seq: number, data: Buffer): void {
    let decoder = this.#decoders.get(stream);
    if (!decoder) {
      decoder = new StringDecoder('utf8');
      this.#decoders.set(stream, decoder);
    }
    const text = decoder.write(data);
    this.#receivedBytes += data.length;
    if (this.#collect) this.#text[stream].push(text);
    this.#emit({ stream, seq, data, text });
  }

  #emit(chunk: OutputChunk): void {
    for (const l of this.#listeners) l(chunk);
    if (!this.#unheard) return;
    this.#unheard.push(chunk);
    this.#unheardBytes += chunk.data.length + chunk.text.length;
    while (this.#unheardBytes > UNHEARD_MAX_BYTES && this.#unheard.length > 1) {
      const dropped = this.#unheard.shift()!;
      this.#unheardBytes -= dropped.data.length + dropped.text.length;
    }
  }

  #finish(): void {
    if (this.#result || this.#detached) return;
    for (const [stream, decoder] of this.#decoders) {
      const rest = decoder.end();
      if (rest === '') continue;
      if (this.#collect) this.#text[stream].push(rest);
      this.#emit({ stream, seq: this.#lastSeq, data: Buffer.alloc(0), text: rest });
    }
    const exit = this.#exit ?? { exitCode: -1, terminal: 'lost', sandboxDenied: false };
    this.#result = {
      processId: this.processId,
      argv: this.argv,
      ...exit,
      stdout: this.#text.stdout.join(''),
      stderr: this.#text.stderr.join(''),
      pty: this.#text.pty.join(''),
      droppedBytes: this.#droppedBytes,
    };
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const w of waiters) w.resolve(this.#result);
    for (const l of this.#endListeners) l(this.#result);
  }

  /** @internal No event will come (the connection is gone for good): pending and new `wait()`s reject with `err`. */
  _fail(err: Error): void {
    if (this.#result) return;
    this.#failure = err;
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const w of waiters) w.reject(err);
  }

  /** @internal The server no longer knows the process (pruned, or gone with its backend): it ends `lost` with what arrived. */
  _lost(): void {
    this.#held = undefined;
    this.#failure = undefined;
    this.#finish();
  }

  /** @internal Starts holding live events (a resume or attach is about to fill the gap); a failure is over. */
  _hold(): void {
    this.#held ??= [];
    this.#failure = undefined;
  }

  /**
   * Fills the gap after `lastSeq` with `process/read`, then applies the held live events
   * (skipping what the reads delivered).
   */
  async _catchUp(): Promise<void> {
    this._hold();
    let filled = false;
    try {
      for (;;) {
        const r = await this.#transport().request('process/read', {
          processId: this.processId,
          afterSeq: this.#lastSeq,
          maxBytes: 4 * 1024 * 1024,
          waitMs: 0,
        });
        this.#countDropped(r.firstRetainedSeq, r.droppedBytes);
        for (const c of r.chunks)
          this.#apply({
            method: 'process/output',
            params: { processId: this.processId, seq: c.seq, stream: c.stream, chunk: c.chunk },
          });
        if (r.chunks.length > 0) continue;
        if (r.exited)
          this.#exit = {
            exitCode: r.exitCode ?? -1,
            terminal: r.terminal ?? 'exited',
            signal: r.signal ?? undefined,
            sandboxDenied: r.sandboxDenied,
          };
        if (r.closed) {
          this.#lastSeq = Math.max(this.#lastSeq, r.nextSeq - 1);
          this.#finish();
        }
        break;
      }
      filled = true;
    } finally {
      // A read cut off by another drop leaves the gap open: the live events stay held (they
      // lie past it) until the next resume has filled it, or a byte would be skipped.
      if (filled) {
        const held = this.#held ?? [];
        this.#held = undefined;
        for (const e of held) this.#apply(e);
      }
    }
  }

  /**
   * A read that starts past everything applied (`firstRetainedSeq > lastSeq`): every chunk
   * received is among those the server dropped, so what it dropped beyond them never came.
   */
  #countDropped(firstRetainedSeq: number, serverDropped: number): void {
    if (firstRetainedSeq <= this.#lastSeq) return;
    this.#droppedBytes = Math.max(this.#droppedBytes, serverDropped - this.#receivedBytes);
  }
}
