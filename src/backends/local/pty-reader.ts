/**
 * The one place where we reach into node-pty (pinned at an exact version; checked when a
 * terminal is attached, so an upgrade that moves it fails loudly, not silently): its reader's
 * `destroy()`, which node-pty calls 200 ms after the child exits whether or not the output was
 * read. We defer it while our tail drain runs (see pty-process.ts).
 *
 * Not done here, measured and dropped: reading what the master holds beyond node-pty's 4 KiB
 * chunk in the same loop turn. It halves the events but drains the terminal in bursts, so the
 * writer stalls while a big chunk is processed: 82 MB/s against 125 MB/s for plain 4 KiB
 * chunks with the same per-byte work.
 */
import type pty from 'node-pty';

interface Socket {
  destroy(err?: Error): unknown;
  readonly destroyed: boolean;
}

export interface PtyReader {
  /** Destroys node-pty's reader for real (node-pty then emits close, then exit). */
  destroy(): void;
  closed(): boolean;
}

export function attachReader(term: pty.IPty): PtyReader {
  const socket = (term as unknown as { _socket?: Socket })._socket;
  if (!socket || typeof socket.destroy !== 'function') {
    throw new Error('node-pty internals changed (no _socket): check the pinned version');
  }
  const original = socket.destroy.bind(socket);
  let released = false;
  socket.destroy = (err?: Error) => {
    // An error (EIO once drained) or our own call destroys; node-pty's bare timer call waits
    // (our poll finds the child gone and drains).
    if (released || err) return original(err);
    return socket;
  };
  return {
    destroy() {
      released = true;
      original();
    },
    closed: () => socket.destroyed,
  };
}
