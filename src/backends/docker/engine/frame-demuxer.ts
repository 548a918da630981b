/**
 * Demultiplexer of Docker's 8-byte framed stream (`Tty: false` execs and attaches):
 * each frame is `[type u8 (0 stdin, 1 stdout, 2 stderr), 0, 0, 0, length u32 BE]` + payload.
 *
 * Why ours and not `modem.demuxStream`: that one `Buffer.concat`s every incoming chunk onto
 * what is left (quadratic on big frames), sends everything that is not type 1 to stderr,
 * ignores the return value of `write()` (no backpressure, so a slow consumer makes the server
 * buffer without bound) and never ends its outputs. This one is a Writable: the source is
 * `pipe()`d into it, and its write callback only fires once both targets accepted the payload
 * (waiting for `'drain'` when they did not), so a slow target pauses the engine socket. Payloads
 * are forwarded as they arrive (no wait for the whole frame, no copy), and both targets are
 * ended when the source ends.
 */
import { Writable } from 'node:stream';
import { execError } from '../../../errors.ts';

const HEADER = 8;

export type FrameStream = 'stdout' | 'stderr';

/** Counters, for metrics and tests. */
export interface DemuxStats {
  stdoutBytes: number;
  stderrBytes: number;
}

/** Splits Docker's 8-byte framed stream into stdout and stderr, with backpressure, ending both at its end. */
export class FrameDemuxer extends Writable {
  readonly stats: DemuxStats = { stdoutBytes: 0, stderrBytes: 0 };
  readonly #stdout: NodeJS.WritableStream;
  readonly #stderr: NodeJS.WritableStream;
  /** Partial header carried over between chunks (at most 7 bytes). */
  #header = Buffer.alloc(HEADER);
  #headerFill = 0;
  /** Payload bytes still expected for the current frame, and where they go. */
  #remaining = 0;
  #target: FrameStream | undefined;

  constructor(stdout: NodeJS.WritableStream, stderr: NodeJS.WritableStream) {
    super({ highWaterMark: 64 * 1024 });
    this.#stdout = stdout;
    this.#stderr = stderr;
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, callback: (error?: Error | null) => void): void {
    // The targets that did not accept a payload of this chunk: one `'drain'` wait each, however
    // many of the chunk's frames they refused (a listener per payload would pile up).
    const full = new Set<NodeJS.WritableStream>();
    let off = 0;
    while (off < chunk.length) {
      if (this.#remaining === 0) {
        const take = Math.min(HEADER - this.#headerFill, chunk.length - off);
        chunk.copy(this.#header, this.#headerFill, off, off + take);
        this.#headerFill += take;
        off += take;
        if (this.#headerFill < HEADER) break;
        this.#headerFill = 0;
        const type = this.#header[0];
        // Type 0 (stdin echo) never happens on exec streams; anything unknown is a protocol error.
        if (type !== 1 && type !== 2) {
          callback(execError('EXEC_ERR_BACKEND', `docker stream: unexpected frame type ${String(type)}`));
          return;
        }
        this.#target = type === 1 ? 'stdout' : 'stderr';
        this.#remaining = this.#header.readUInt32BE(4);
        continue;
      }
      const take = Math.min(this.#remaining, chunk.length - off);
      const payload = chunk.subarray(off, off + take);
      off += take;
      this.#remaining -= take;
      const target = this.#target === 'stdout' ? this.#stdout : this.#stderr;
      if (this.#target === 'stdout') this.stats.stdoutBytes += take;
      else this.stats.stderrBytes += take;
      if (!target.write(payload)) full.add(target);
    }
    let pending = full.size;
    if (pending === 0) {
      callback();
      return;
    }
    for (const target of full)
      target.once('drain', () => {
        pending -= 1;
        if (pending === 0) callback();
      });
  }

  override _final(callback: (error?: Error | null) => void): void {
    // A truncated last frame means the connection broke mid-frame; still end the targets so
    // consumers finish, and report it.
    const truncated = this.#remaining > 0 || this.#headerFill > 0;
    let open = 2;
    const onEnd = (): void => {
      open -= 1;
      if (open === 0) callback(truncated ? execError('EXEC_ERR_BACKEND', 'docker stream ended inside a frame') : null);
    };
    this.#stdout.end(onEnd);
    this.#stderr.end(onEnd);
  }
}

/** A Writable that hands every chunk to `fn` synchronously (always accepts: no backpressure). */
export function callbackWritable(fn: (data: Buffer) => void): Writable {
  return new Writable({
    write(chunk: Buffer, _enc, cb) {
      fn(chunk);
      cb();
    },
  });
}
