/**
 * `process/output` as a binary WebSocket frame: an extension a client asks for with
 * `initialize { binaryOutput: true }` (docs/protocol.md, "Binary output frames"). A stream's
 * bytes then cross the wire as they are, instead of base64 inside a JSON text frame: a third
 * fewer bytes and no encoding, parsing or decoding of them on either side. Every other message,
 * and `process/read`'s chunks, stay JSON.
 *
 * Layout (little-endian): u8 kind (1: process output), u8 stream (0 stdout, 1 stderr, 2 pty),
 * u16 byte length of the process id, u64 seq, the process id (UTF-8), then the output bytes.
 */
import type { StreamName } from './common.ts';

/** The first byte of a binary frame: the one kind there is, process output. */
export const BINARY_OUTPUT_KIND = 1;
/** Bytes before the process id: kind, stream, id length and seq. */
export const BINARY_OUTPUT_HEADER_BYTES = 12;
const STREAMS: readonly StreamName[] = ['stdout', 'stderr', 'pty'];

/** What one binary output frame carries. */
export interface BinaryOutput {
  readonly processId: string;
  readonly seq: number;
  readonly stream: StreamName;
  readonly data: Buffer;
}

/** Bytes a frame for `processId` and `dataBytes` of output takes. */
export function binaryOutputBytes(processId: string, dataBytes: number): number {
  return BINARY_OUTPUT_HEADER_BYTES + Buffer.byteLength(processId) + dataBytes;
}

/** Writes a frame into `frame` (exactly `binaryOutputBytes` long). */
export function encodeBinaryOutput(frame: Buffer, o: BinaryOutput): void {
  frame.writeUInt8(BINARY_OUTPUT_KIND, 0);
  frame.writeUInt8(Math.max(0, STREAMS.indexOf(o.stream)), 1);
  const idBytes = frame.write(o.processId, BINARY_OUTPUT_HEADER_BYTES, 'utf8');
  frame.writeUInt16LE(idBytes, 2);
  frame.writeBigUInt64LE(BigInt(o.seq), 4);
  o.data.copy(frame, BINARY_OUTPUT_HEADER_BYTES + idBytes);
}

/** The frame's fields (its data a view into `frame`), or a reason it is not one. */
export function decodeBinaryOutput(frame: Buffer): BinaryOutput | string {
  if (frame.length < BINARY_OUTPUT_HEADER_BYTES) return `binary frame of ${frame.length} bytes is too short`;
  if (frame.readUInt8(0) !== BINARY_OUTPUT_KIND) return `unknown binary frame kind ${frame.readUInt8(0)}`;
  const stream = STREAMS[frame.readUInt8(1)];
  if (stream === undefined) return `unknown stream ${frame.readUInt8(1)} in a binary output frame`;
  const idEnd = BINARY_OUTPUT_HEADER_BYTES + frame.readUInt16LE(2);
  if (idEnd > frame.length) return 'binary output frame cut inside its process id';
  return {
    processId: frame.toString('utf8', BINARY_OUTPUT_HEADER_BYTES, idEnd),
    seq: Number(frame.readBigUInt64LE(4)),
    stream,
    data: frame.subarray(idEnd),
  };
}
