/**
 * Reads an agent's link connection into one buffer that every connection of the server shares.
 *
 * Why: Node reads a socket into a freshly allocated 64 KiB buffer per read. A 64 MB stream was
 * then a thousand buffers outside V8's heap, and their growth alone set off two or three full
 * (mark-compact) collections per stream: the server spent 0.25-0.35 CPU-s per 64 MB against the
 * local backend's 0.11, whose output channels read into a buffer of their own
 * (src/backends/local/output-channels.ts). `net.Socket`'s `onread` does that, but Node offers
 * it only to a socket built around a handle, and the link's connections are accepted by a
 * server: so the accepted socket's handle is moved into a new socket built with `onread`.
 * The parser hands frames on as views of this buffer; whoever keeps bytes copies them (the
 * ProcessSink contract, and `AgentConnection` for replies it resolves later).
 */
import { Socket } from 'node:net';

/**
 * One read takes up to this much: the agent writes its queue with one `writev` (up to 31 frames
 * of up to 64 KiB), so a stream that runs ahead is taken in a few reads.
 */
export const LINK_READ_BYTES = 256 * 1024;
const readBuffer = Buffer.allocUnsafeSlow(LINK_READ_BYTES);

interface MovableSocket {
  _handle?: object | null;
}

/**
 * `socket` (accepted, paused, nothing read from it yet but what it buffered) as a new socket
 * whose reads land in the shared buffer: `onData` gets a view that is valid during the call only.
 * What the old socket had buffered is handed to `onData` before anything newer. Undefined when
 * the socket has no handle to move (it is then read as it is).
 */
export function readIntoSharedBuffer(socket: Socket, onData: (data: Buffer) => void): Socket | undefined {
  const old = socket as unknown as MovableSocket;
  const handle = old._handle;
  if (handle === undefined || handle === null || socket.destroyed) return undefined;
  // Synchronous from here on: no read can happen between the two sockets.
  const leftover = socket.readableLength > 0 ? (socket.read() as Buffer | null) : null;
  old._handle = null;
  const moved = new Socket({
    handle,
    readable: true,
    writable: true,
    onread: {
      buffer: readBuffer,
      callback: (n: number) => {
        onData(readBuffer.subarray(0, n));
        return true;
      },
    },
  } as ConstructorParameters<typeof Socket>[0]);
  if (leftover !== null && leftover.length > 0) onData(leftover);
  return moved;
}
