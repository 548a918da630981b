/**
 * The two places where we reach into node-pty (pinned at an exact version; both checked when a
 * terminal is attached, so an upgrade that moves them fails loudly, not silently):
 *
 * - its reader's `destroy()`, which node-pty calls 200 ms after the child exits whether or not
 *   the output was read. We defer it while our tail drain runs (see pty-process.ts).
 * - its master descriptor, for reading more per loop turn. A terminal hands out at most 4 KiB
 *   per read and libuv stops after a short read, so node-pty delivers one 4 KiB chunk per
 *   event-loop turn, which caps PTY throughput near 90 MB/s here. After each chunk we read what
 *   the (non-blocking) master already holds, up to 64 KiB, in the same turn. Only when the
 *   stream has nothing buffered: then libuv reads nothing in between and the order is kept.
 */
import { readSync } from 'node:fs';
import type pty from 'node-pty';

/** Upper bound of one turn's extra reads; also the size of the shared scratch buffer. */
const READ_MORE_BYTES = 64 * 1024;
/** Synchronous use only, so one buffer serves every terminal. */
const scratch = Buffer.allocUnsafe(READ_MORE_BYTES);

interface Socket {
  destroy(err?: Error): unknown;
  readonly destroyed: boolean;
  readonly readableLength: number;
}

export interface PtyReader {
  /** Destroys node-pty's reader for real (node-pty then emits close, then exit). */
  destroy(): void;
  closed(): boolean;
  /** Called when node-pty asks for its post-exit destroy while we still drain. */
  onDeferredDestroy(listener: () => void): void;
  /** `first` (node-pty's chunk) followed by what the terminal already holds. */
  readMore(first: Buffer): Buffer;
}

export function attachReader(term: pty.IPty): PtyReader {
  const internals = term as unknown as { _socket?: Socket; _fd?: number };
  const socket = internals._socket;
  const fd = internals._fd;
  if (!socket || typeof socket.destroy !== 'function' || typeof fd !== 'number') {
    throw new Error('node-pty internals changed (no _socket or _fd): check the pinned version');
  }
  const original = socket.destroy.bind(socket);
  let listener: (() => void) | undefined;
  let released = false;
  socket.destroy = (err?: Error) => {
    // An error (EIO once drained) or our own call destroys; node-pty's bare timer call waits.
    if (released || err) return original(err);
    listener?.();
    return socket;
  };
  return {
    destroy() {
      released = true;
      original();
    },
    closed: () => socket.destroyed,
    onDeferredDestroy(l) {
      listener = l;
    },
    readMore(first) {
      if (socket.destroyed || socket.readableLength > 0) return first;
      let used = 0;
      while (used < READ_MORE_BYTES) {
        let n: number;
        try {
          n = readSync(fd, scratch, used, READ_MORE_BYTES - used, null);
        } catch {
          // EAGAIN: nothing more for now. EIO (terminal hung up): libuv reads it too and ends.
          break;
        }
        if (n <= 0) break;
        used += n;
      }
      return used === 0 ? first : Buffer.concat([first, scratch.subarray(0, used)]);
    },
  };
}
