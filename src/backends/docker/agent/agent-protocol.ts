/**
 * The wire protocol between the docker backend and the exec agent (native/exec-agent.c), in
 * one place: frame types, payload encoders and the parser of the agent's side. The agent runs
 * as a docker exec (`Tty: false`), so its frames arrive inside Docker's 8-byte stdout frames;
 * the parser peels both layers in one pass.
 *
 * Frame: u32 payload length, u8 type, u8 stream, u16 zero, u32 handle (little-endian), payload.
 * A handle names one process; the server picks it, unique for the agent's lifetime.
 *
 * Server -> agent                                  Agent -> server
 *   HELLO   u32 version, u32 retention, u32 window   HELLO     "version=N\npid=P\nprocesses=K\nidle=MS\n"
 *           [u32 flags: 1, gather a terminal streaming fast on one CPU (native/pty-pin.h)]
 *   NOTE    (the session was used now: HELLO's idle= is the ms since the last NOTE, or since the
 *           daemon started, so a server that takes the session over keeps its idle clock)
 *   SPAWN   NUL-ended fields (see encodeSpawn)        SPAWNED   "pid"
 *   STDIN   bytes                                     FAILED    "errno\0message" (nothing runs; "spawn:ERRNO":
 *                                                               the cwd or program, EXEC_ERR_SPAWN_FAILED)
 *   CLOSE_STDIN                                       OUTPUT    u64 offset, bytes (stream 1/2/3)
 *   RESIZE  u16 rows, u16 cols                        EXIT      "exited\0code" | "signaled\0signo"
 *   SIGNAL  u32 signo (to the process group)          ERROR     message (handle 0: the connection)
 *   ACK     n x (u64 seq, u64 end offset)             STDIN_ACK u64 bytes written to the command
 *   PAUSE / RESUME (reading the command's output)     PROC      record of a kept process (LIST)
 *   FORGET  (the record may go)                       LIST_END
 *   LIST    (every kept process, its retained output, its exit)
 *   DETACH  (flush, then let this connection go)
 *   EGRESS  u16 port: listen on 127.0.0.1:port        EGRESS    "port" (listening; ERROR: it cannot)
 *           and tunnel each client over the link (native/exec-agent-egress.c; docs/architecture.md, "Egress");
 *           then optional u8 flags: 1, tunnels greet EXAGTUN2 and hand their client's socket to the
 *           server's relay when it asks (src/egress/native-relay.ts)
 *                                                    TUNNEL    u32 id: a client waits (no link): the server
 *                                                              runs `exec-agent tunnel SOCKET id` to carry it
 *
 * Flow control: the agent reads a command's output only while less than `window` bytes of it
 * are unacknowledged. An ACK with seq 0 is credit only; with a seq it also records which seq
 * of the server's log ended at that offset, so a restarted server rebuilds the same chunks
 * under the same seqs (docs/docker-backend.md, "Processes that survive the server").
 */
import type { SpawnMode, StreamName, TerminalSize } from '../../types.ts';
import { execError } from '../../../errors.ts';

/** The protocol version the server's hello names; the agent refuses another. */
export const AGENT_PROTOCOL_VERSION = 1;
/** Bytes of a frame's header: payload length, type, stream, zero, handle. */
export const AGENT_HEADER_BYTES = 12;
/** Largest payload either side accepts (a bigger one is a framing error). */
export const AGENT_MAX_PAYLOAD = 1024 * 1024 + 64;

/** Frame types the server sends (native/exec-agent.c has the same numbers). */
export const ToAgent = {
  HELLO: 1,
  SPAWN: 2,
  STDIN: 3,
  CLOSE_STDIN: 4,
  RESIZE: 5,
  SIGNAL: 6,
  ACK: 7,
  PAUSE: 8,
  RESUME: 9,
  FORGET: 10,
  LIST: 11,
  DETACH: 12,
  EGRESS: 13,
  NOTE: 14,
} as const;

/** Frame types the agent sends. */
export const FromAgent = {
  HELLO: 1,
  SPAWNED: 2,
  FAILED: 3,
  OUTPUT: 4,
  EXIT: 5,
  ERROR: 6,
  STDIN_ACK: 7,
  PROC: 8,
  LIST_END: 9,
  EGRESS: 10,
  TUNNEL: 11,
} as const;
export type FromAgentType = (typeof FromAgent)[keyof typeof FromAgent];

const STREAMS: Readonly<Record<number, StreamName>> = { 1: 'stdout', 2: 'stderr', 3: 'pty' };

/** One frame of `type` for `handle`. */
export function frame(type: number, handle: number, payload?: Buffer): Buffer {
  const len = payload?.length ?? 0;
  const out = Buffer.allocUnsafe(AGENT_HEADER_BYTES + len);
  out.writeUInt32LE(len, 0);
  out.writeUInt8(type, 4);
  out.writeUInt8(0, 5);
  out.writeUInt16LE(0, 6);
  out.writeUInt32LE(handle, 8);
  if (payload) payload.copy(out, AGENT_HEADER_BYTES);
  return out;
}

/** HELLO flags. */
export const HelloFlag = {
  /** Co-locate a terminal streaming fast with the agent on one CPU (the operator's `--pty-pin`). */
  PTY_PIN: 1,
} as const;

/** The server's hello: the protocol version, how much output the agent retains, its credit window, flags. */
export function encodeHello(retentionBytes: number, windowBytes: number, flags = 0): Buffer {
  const p = Buffer.allocUnsafe(16);
  p.writeUInt32LE(AGENT_PROTOCOL_VERSION, 0);
  p.writeUInt32LE(retentionBytes, 4);
  p.writeUInt32LE(windowBytes, 8);
  p.writeUInt32LE(flags, 12);
  return frame(ToAgent.HELLO, 0, p);
}

/** A command as the agent starts it. */
export interface AgentSpawn {
  readonly mode: SpawnMode;
  readonly size: TerminalSize;
  readonly uid: number;
  readonly gid: number;
  readonly cwd: string;
  readonly arg0?: string | undefined;
  readonly argv: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  /** Opaque to the agent; handed back by LIST (what a restarted server needs). */
  readonly tag: string;
}

/** Fields NUL-ended: mode rows cols uid gid cwd arg0 argc argv... envc env... tag. */
export function encodeSpawn(handle: number, s: AgentSpawn): Buffer {
  const env = Object.entries(s.env).map(([k, v]) => `${k}=${v}`);
  const fields = [
    s.mode,
    String(s.size.rows),
    String(s.size.cols),
    String(s.uid),
    String(s.gid),
    s.cwd,
    s.arg0 ?? '',
    String(s.argv.length),
    ...s.argv,
    String(env.length),
    ...env,
    s.tag,
  ];
  return frame(ToAgent.SPAWN, handle, Buffer.from(`${fields.join('\0')}\0`, 'utf8'));
}

/** A RESIZE frame: a PTY's new size. */
export function encodeResize(handle: number, size: TerminalSize): Buffer {
  const p = Buffer.allocUnsafe(4);
  p.writeUInt16LE(Math.min(size.rows, 0xffff), 0);
  p.writeUInt16LE(Math.min(size.cols, 0xffff), 2);
  return frame(ToAgent.RESIZE, handle, p);
}

/** A SIGNAL frame: the signal's Linux number, for the command's whole process session. */
export function encodeSignal(handle: number, signo: number): Buffer {
  const p = Buffer.allocUnsafe(4);
  p.writeUInt32LE(signo, 0);
  return frame(ToAgent.SIGNAL, handle, p);
}

/** `marks`: [seq, endOffset] pairs; seq 0 is credit only. */
export function encodeAck(handle: number, marks: ReadonlyArray<readonly [number, number]>): Buffer {
  const p = Buffer.allocUnsafe(16 * marks.length);
  marks.forEach(([seq, end], i) => {
    p.writeBigUInt64LE(BigInt(seq), i * 16);
    p.writeBigUInt64LE(BigInt(end), i * 16 + 8);
  });
  return frame(ToAgent.ACK, handle, p);
}

/** A frame from the agent. `payload` may be a view of a reused buffer: valid until the handler returns. */
export interface AgentFrame {
  readonly type: number;
  readonly stream: StreamName | undefined;
  readonly handle: number;
  readonly payload: Buffer;
}

/** The most processes an agent keeps (MAX_PROCS in native/exec-agent.c): a longer LIST is not an agent's. */
export const AGENT_MAX_PROCS = 256;

/**
 * Why `f` cannot be an agent's frame (its payload too short for its fixed fields), or undefined.
 * The agent is root's in a `danger-full-access` container, so its frames are checked here, at
 * the edge, before any handler reads a field (docs/security-agent-link.md).
 */
export function malformed(f: AgentFrame): string | undefined {
  const need = f.type === FromAgent.OUTPUT || f.type === FromAgent.STDIN_ACK ? 8 : f.type === FromAgent.TUNNEL ? 4 : 0;
  return f.payload.length < need ? `frame type ${f.type} with a payload of ${f.payload.length} bytes` : undefined;
}

/** A kept process as LIST reports it. */
export interface ProcRecord {
  readonly tag: string;
  readonly mode: SpawnMode;
  readonly pid: number;
  /** Offset of the oldest byte the agent still holds, and of the next byte. */
  readonly firstOffset: number;
  readonly totalOffset: number;
  /** [seq, endOffset] marks the previous server acknowledged, oldest first. */
  readonly marks: ReadonlyArray<readonly [number, number]>;
}

/** One process the agent kept, from its LIST reply. */
export function parseProcRecord(payload: Buffer): ProcRecord {
  const f = payload.toString('utf8').split('\0');
  const marks: Array<readonly [number, number]> = [];
  const count = Number(f[5] ?? 0);
  for (let i = 0; i < count; i++) {
    const [seq, end] = (f[6 + i] ?? '').split(',').map(Number);
    if (seq !== undefined && end !== undefined && Number.isFinite(seq) && Number.isFinite(end)) marks.push([seq, end]);
  }
  const mode = f[1] === 'pty' || f[1] === 'pipe' ? f[1] : 'pipe-no-stdin';
  return { tag: f[0] ?? '', mode, pid: Number(f[2]), firstOffset: Number(f[3]), totalOffset: Number(f[4]), marks };
}

/** `exited\0code` or `signaled\0signo`. */
export function parseExit(payload: Buffer): { kind: 'exited'; code: number } | { kind: 'signaled'; signo: number } {
  const [kind, value] = payload.toString('utf8').split('\0');
  const n = Number(value);
  return kind === 'signaled' ? { kind: 'signaled', signo: n } : { kind: 'exited', code: n };
}

/**
 * Peels Docker's stdout/stderr frames and the agent's frames from the exec connection.
 * Why by hand: one pass over each socket read, no stream objects per layer, and a frame that
 * lies inside one read is handed on as a view (no copy); only a frame split across reads is
 * assembled, into one reused buffer (handlers copy what they keep). Bounded: a length past
 * AGENT_MAX_PAYLOAD is a framing error, reported once, after which nothing more is parsed.
 */
export class AgentStreamParser {
  readonly #onFrame: (f: AgentFrame) => void;
  readonly #onStderr: (text: Buffer) => void;
  readonly #onError: (err: Error) => void;
  // Docker layer.
  readonly #dHeader = Buffer.alloc(8);
  #dFill = 0;
  #dRemaining = 0;
  #dStream = 1;
  // Agent layer.
  readonly #aHeader = Buffer.alloc(AGENT_HEADER_BYTES);
  #aFill = 0;
  #aNeed = -1; // payload bytes expected; -1 while reading a header
  #assembly: Buffer = Buffer.alloc(0);
  #assembled = 0;
  #failed = false;

  /**
   * `framing` is `docker` for an attached exec's multiplexed stream, `raw` for a direct socket
   * to the daemon (agent frames only, nothing from stderr).
   */
  constructor(
    onFrame: (f: AgentFrame) => void,
    onStderr: (text: Buffer) => void,
    onError: (err: Error) => void,
    framing: 'docker' | 'raw' = 'docker',
  ) {
    this.#onFrame = onFrame;
    this.#onStderr = onStderr;
    this.#onError = onError;
    // A raw stream is one endless stdout frame of the docker layer.
    if (framing === 'raw') this.#dRemaining = Number.POSITIVE_INFINITY;
  }

  push(chunk: Buffer): void {
    let off = 0;
    while (off < chunk.length && !this.#failed) {
      if (this.#dRemaining === 0) {
        const take = Math.min(8 - this.#dFill, chunk.length - off);
        chunk.copy(this.#dHeader, this.#dFill, off, off + take);
        this.#dFill += take;
        off += take;
        if (this.#dFill < 8) return;
        this.#dFill = 0;
        this.#dStream = this.#dHeader[0] ?? 0;
        this.#dRemaining = this.#dHeader.readUInt32BE(4);
        if (this.#dStream !== 1 && this.#dStream !== 2) {
          this.#fail(`docker stream: unexpected frame type ${this.#dStream}`);
          return;
        }
        continue;
      }
      const take = Math.min(this.#dRemaining, chunk.length - off);
      const part = chunk.subarray(off, off + take);
      off += take;
      this.#dRemaining -= take;
      if (this.#dStream === 2) this.#onStderr(part);
      else this.#agentBytes(part);
    }
  }

  #agentBytes(data: Buffer): void {
    let off = 0;
    while (off < data.length && !this.#failed) {
      if (this.#aNeed < 0) {
        if (this.#aFill === 0 && data.length - off >= AGENT_HEADER_BYTES) {
          const len = data.readUInt32LE(off);
          if (len > AGENT_MAX_PAYLOAD) {
            this.#fail(`agent frame of ${len} bytes exceeds the limit`);
            return;
          }
          if (data.length - off - AGENT_HEADER_BYTES >= len) {
            // Whole frame inside this read: hand on a view.
            this.#emit(data, off, data.subarray(off + AGENT_HEADER_BYTES, off + AGENT_HEADER_BYTES + len));
            off += AGENT_HEADER_BYTES + len;
            continue;
          }
        }
        const take = Math.min(AGENT_HEADER_BYTES - this.#aFill, data.length - off);
        data.copy(this.#aHeader, this.#aFill, off, off + take);
        this.#aFill += take;
        off += take;
        if (this.#aFill < AGENT_HEADER_BYTES) return;
        const len = this.#aHeader.readUInt32LE(0);
        if (len > AGENT_MAX_PAYLOAD) {
          this.#fail(`agent frame of ${len} bytes exceeds the limit`);
          return;
        }
        this.#aNeed = len;
        this.#assembled = 0;
        if (this.#assembly.length < len) this.#assembly = Buffer.allocUnsafe(Math.max(len, 64 * 1024));
        if (len === 0) this.#finishAssembled();
        continue;
      }
      const take = Math.min(this.#aNeed - this.#assembled, data.length - off);
      data.copy(this.#assembly, this.#assembled, off, off + take);
      this.#assembled += take;
      off += take;
      if (this.#assembled === this.#aNeed) this.#finishAssembled();
    }
  }

  #finishAssembled(): void {
    const len = this.#aNeed;
    this.#aNeed = -1;
    this.#aFill = 0;
    this.#emit(this.#aHeader, 0, this.#assembly.subarray(0, len));
  }

  #emit(header: Buffer, at: number, payload: Buffer): void {
    const type = header.readUInt8(at + 4);
    this.#onFrame({ type, stream: STREAMS[header.readUInt8(at + 5)], handle: header.readUInt32LE(at + 8), payload });
  }

  #fail(message: string): void {
    this.#failed = true;
    this.#onError(execError('EXEC_ERR_BACKEND', message));
  }
}
