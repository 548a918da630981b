/** The fixed-length greeting a new local connection starts with (a token, a secret). */
import type { Socket } from 'node:net';

/**
 * Reads the first `length` bytes `socket` sends, then pauses it and hands them, and whatever came
 * with them, to `onHead`; a connection that has not sent them within `timeoutMs` is destroyed.
 * The caller handles the socket's errors.
 */
export function readHead(
  socket: Socket,
  length: number,
  timeoutMs: number,
  onHead: (head: Buffer, rest: Buffer) => void,
): void {
  let got = Buffer.alloc(0);
  const timer = setTimeout(() => socket.destroy(), timeoutMs);
  const onData = (d: Buffer): void => {
    got = Buffer.concat([got, d]);
    if (got.length < length) return;
    clearTimeout(timer);
    socket.off('data', onData);
    socket.pause();
    onHead(got.subarray(0, length), got.subarray(length));
  };
  socket.on('data', onData);
}
