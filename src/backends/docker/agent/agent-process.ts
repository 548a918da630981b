/**
 * A user command run by the session's exec agent. Output arrives as offset-tagged frames, so a
 * replay after a reconnect is deduplicated byte-exactly; the exit arrives after the last output
 * (the agent queues it behind), which keeps the sink contract. Delivered output is acknowledged
 * once per event-loop turn: that is the agent's credit (flow control) and, with the seq the
 * engine published it under, the mark a restarted server rebuilds the log from.
 */
import { execError } from '../../../errors.ts';
import { CommandInput } from '../../stdin.ts';
import { signalName, signalNumber } from '../../../protocol/signals.ts';
import type {
  BackendExit,
  BackendProcess,
  ProcessSink,
  SandboxType,
  SignalName,
  SpawnMode,
  TerminalSize,
} from '../../types.ts';
import {
  encodeAck,
  encodeResize,
  encodeSignal,
  frame,
  FromAgent,
  parseExit,
  ToAgent,
  type AgentFrame,
} from './agent-protocol.ts';
import type { AgentConnection, HandleListener } from './agent-connection.ts';

/** Unread stdin the server lets a command have in flight (as the local backend). */
const STDIN_LIMIT = 8 * 1024 * 1024;
/**
 * Credit below this many bytes is sent with the next urgent frame (or within 20 ms) rather
 * than on its own: an eighth of the smallest window the server gives an agent (64 KiB,
 * `agentWindowFor`), so the agent never stops reading for want of it.
 */
const LAZY_CREDIT_BYTES = 8 * 1024;
/** Stdin goes out in frames of at most this size. */
const STDIN_FRAME = 256 * 1024;

/** What an agent process is made with: its handle, mode, sandbox and where its output stands. */
export interface AgentProcessInit {
  readonly handle: number;
  readonly mode: SpawnMode;
  readonly sandboxType: SandboxType;
  readonly sink: ProcessSink;
  /** Offset of the next byte this process expects (0 for a new one). */
  readonly receivedOffset?: number;
  /** The process is done with the agent (exit delivered or lost): the channel forgets it. */
  readonly done: (p: AgentProcess) => void;
}

/** A command the agent runs: replayed output deduplicated by offset, delivery acknowledged as credit. */
export class AgentProcess implements BackendProcess, HandleListener {
  readonly handle: number;
  readonly sandboxType: SandboxType;
  readonly #mode: SpawnMode;
  readonly #sink: ProcessSink;
  readonly #done: (p: AgentProcess) => void;
  #conn: AgentConnection | undefined;
  #received: number;
  #acked: number;
  #ackScheduled = false;
  /** Credit the agent surely has: sent at once, not with `sendLater`. */
  #creditSent: number;
  /**
   * Marks the agent never read: published while its connection was detaching or gone (output
   * the agent flushed after a detach). Sent on the next bind; a fork of a checkpoint taken
   * meanwhile gets them from the server instead (`unsentMarks`, docs/snapshots.md).
   */
  #unsent: Array<readonly [number, number]> = [];
  #stdinSent = 0;
  #stdinWritten = 0;
  readonly #input: CommandInput;
  #paused = false;
  #exited = false;

  constructor(init: AgentProcessInit) {
    this.handle = init.handle;
    this.#mode = init.mode;
    this.sandboxType = init.sandboxType;
    this.#sink = init.sink;
    this.#done = init.done;
    this.#received = init.receivedOffset ?? 0;
    this.#acked = this.#received;
    this.#creditSent = this.#received;
    this.#input = new CommandInput(init.mode);
  }

  get exited(): boolean {
    return this.#exited;
  }

  /** (Re)binds the process to a live connection. */
  bind(conn: AgentConnection): void {
    this.#conn = conn;
    conn.listen(this.handle, this);
    if (this.#unsent.length > 0) conn.send(encodeAck(this.handle, this.#unsent.splice(0)));
    if (this.#paused) conn.send(frame(ToAgent.PAUSE, this.handle));
  }

  frame(f: AgentFrame): void {
    if (this.#exited) return;
    switch (f.type) {
      case FromAgent.OUTPUT: {
        const offset = Number(f.payload.readBigUInt64LE(0));
        let data = f.payload.subarray(8);
        const end = offset + data.length;
        if (end <= this.#received) return; // replayed: already delivered
        if (offset < this.#received) data = data.subarray(this.#received - offset);
        else if (offset > this.#received) {
          // The agent dropped output while no server was attached (past its retention).
          this.#received = offset;
        }
        this.#received = end;
        this.#sink.output(f.stream ?? 'stdout', data);
        this.#scheduleAck();
        return;
      }
      case FromAgent.STDIN_ACK:
        this.#stdinWritten = Number(f.payload.readBigUInt64LE(0));
        this.#wakeStdin();
        return;
      case FromAgent.EXIT: {
        const e = parseExit(f.payload);
        this.#finish(
          e.kind === 'signaled'
            ? { kind: 'signaled', signo: e.signo, signal: signalName(e.signo) }
            : { kind: 'exited', code: e.code },
        );
        return;
      }
      case FromAgent.ERROR:
        // Per-process errors (stdin overflow) are the agent's report; the command goes on.
        return;
    }
  }

  /**
   * The engine published output of this process up to `endOffset` (bytes delivered to the sink)
   * under `seq`: a restarted server rebuilds that chunk under the same seq.
   */
  acknowledge(seq: number, endOffset: number): void {
    // At once, not batched: the engine tells clients about the chunk right after this.
    const conn = this.#conn;
    if (conn === undefined || conn.closed || conn.detaching) {
      this.#acked = Math.max(this.#acked, endOffset);
      // Bounded as the agent bounds its own marks (MAX_MARKS in native/exec-agent.c).
      if (this.#unsent.push([seq, endOffset]) > 4096) this.#unsent.shift();
      return;
    }
    // The credit for what arrived meanwhile (still coalescing) rides in the same frame: one
    // write and one wake-up of the agent per chunk instead of two (the mark, then the credit).
    const credit = this.#received > endOffset && this.#received > this.#acked;
    const marks: Array<readonly [number, number]> = [[seq, endOffset]];
    if (credit) marks.push([0, this.#received]);
    conn.send(encodeAck(this.handle, marks));
    this.#acked = Math.max(this.#acked, credit ? this.#received : endOffset);
    if (credit) this.#creditSent = this.#received;
  }

  /** Marks published since the agent last read any (see `#unsent`), oldest first. */
  get unsentMarks(): ReadonlyArray<readonly [number, number]> {
    return this.#unsent;
  }

  get deliveredBytes(): number {
    return this.#received;
  }

  #scheduleAck(): void {
    if (this.#ackScheduled) return;
    this.#ackScheduled = true;
    setImmediate(() => {
      this.#ackScheduled = false;
      if (!this.#conn || this.#conn.closed || this.#received <= this.#acked) return;
      // Credit for what arrived but is not published yet (held, or coalescing). Far below the
      // agent's window it can wait for the next frame that goes anyway (a command's few
      // bytes of output need no wake-up of the agent of their own).
      // `#creditSent` lags when lazy credit went out meanwhile: that only makes this urgent sooner.
      const ack = encodeAck(this.handle, [[0, this.#received]]);
      if (this.#received - this.#creditSent < LAZY_CREDIT_BYTES) this.#conn.sendLater(ack);
      else {
        this.#conn.send(ack);
        this.#creditSent = this.#received;
      }
      this.#acked = this.#received;
    });
  }

  /** The connection broke and the agent no longer has this process (or the container died). */
  lose(reason: string): void {
    this.#finish({ kind: 'lost', reason });
  }

  #stdinWaiters: Array<() => void> = [];

  #wakeStdin(): void {
    for (const w of this.#stdinWaiters.splice(0)) w();
  }

  /** Resolves once `bytes` more stdin fit in what the command may have unread (or it ended). */
  async stdinRoom(bytes: number): Promise<void> {
    const need = Math.min(bytes, STDIN_LIMIT);
    while (!this.#exited && this.#input.open && this.#stdinSent - this.#stdinWritten + need > STDIN_LIMIT) {
      await new Promise<void>((resolve) => this.#stdinWaiters.push(resolve));
    }
  }

  #finish(exit: BackendExit): void {
    if (this.#exited) return;
    this.#exited = true;
    this.#wakeStdin();
    this.#input.shut();
    this.#conn?.unlisten(this.handle);
    this.#done(this);
    this.#sink.exit(exit);
  }

  async write(data: Buffer): Promise<void> {
    if (!this.#input.open || this.#exited || data.length === 0) return;
    if (this.#stdinSent - this.#stdinWritten + data.length > STDIN_LIMIT) {
      throw execError('EXEC_ERR_TOO_LARGE', `stdin buffer full (${STDIN_LIMIT} bytes not yet read by the process)`);
    }
    for (let off = 0; off < data.length; off += STDIN_FRAME)
      this.#conn?.send(frame(ToAgent.STDIN, this.handle, data.subarray(off, off + STDIN_FRAME)));
    this.#stdinSent += data.length;
  }

  async closeStdin(): Promise<void> {
    await this.#input.end(
      (d) => this.write(d),
      () => this.#conn?.send(frame(ToAgent.CLOSE_STDIN, this.handle)),
    );
  }

  async resize(size: TerminalSize): Promise<void> {
    if (this.#mode === 'pty' && !this.#exited) this.#conn?.send(encodeResize(this.handle, size));
  }

  async signal(signal: SignalName): Promise<void> {
    const signo = signalNumber(signal);
    // SIGKILL goes out even after the exit: it also sweeps what the command left in its session.
    if (signo !== undefined && (!this.#exited || signo === 9)) this.#conn?.send(encodeSignal(this.handle, signo));
  }

  pauseOutput(): void {
    if (this.#paused || this.#exited) return;
    this.#paused = true;
    this.#conn?.send(frame(ToAgent.PAUSE, this.handle));
  }

  resumeOutput(): void {
    if (!this.#paused || this.#exited) return;
    this.#paused = false;
    this.#conn?.send(frame(ToAgent.RESUME, this.handle));
  }

  /** The engine no longer needs the process: the agent may drop its record. */
  dispose(): void {
    // No one waits on it: it rides with the next spawn (AgentConnection.sendLater).
    this.#conn?.sendLater(frame(ToAgent.FORGET, this.handle));
  }
}
