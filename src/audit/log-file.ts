/**
 * The audit log as a file: locked to one writer (log-lock.ts), appended to, and read back at
 * its end for the line a restarted server's chain goes on from. That read finds the last
 * complete line whatever its length (a line is at most `MAX_LINE_BYTES`, line-bound.ts; a log
 * of an earlier version may hold longer ones) and what follows it when the file does not end
 * with a newline: a line torn by a crash mid-write, which the new `audit.start` declares.
 */
import { open, realpath, stat, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { execError } from '../errors.ts';
import { MAX_LINE_BYTES } from './line-bound.ts';
import { lockLog, type LogLock } from './log-lock.ts';

/** Where the audit lines go: the bytes of whole lines, in order. */
export interface Sink {
  write(bytes: Buffer): Promise<void>;
  close(): Promise<void>;
}

/** The end of an existing log, as written (bytes, not decoded text). */
export interface Tail {
  /** The last complete line, without its newline. */
  readonly last: Buffer | undefined;
  /** The bytes after the last newline: a line torn by a crash mid-write. */
  readonly torn: Buffer | undefined;
}

const NEWLINE = 0x0a;

/** The first read from the end: one line at most and the newline before it. */
const FIRST_READ = MAX_LINE_BYTES + 2;

/** How far back a last line is looked for: a file whose lines are longer is not this server's log. */
export const TAIL_LIMIT = 64 * 1024 * 1024;

/** The last complete line and the torn rest of a file of `size` bytes. */
export async function readTail(handle: FileHandle, size: number, path: string): Promise<Tail> {
  for (let window = FIRST_READ; ; window *= 4) {
    const start = Math.max(0, size - window);
    const buf = Buffer.alloc(size - start);
    const { bytesRead } = await handle.read(buf, 0, buf.length, start);
    const data = buf.subarray(0, bytesRead);
    const end = data.lastIndexOf(NEWLINE);
    const before = end > 0 ? data.lastIndexOf(NEWLINE, end - 1) : -1;
    if (before >= 0 || start === 0) {
      const rest = data.subarray(end + 1);
      return {
        last: end >= 0 ? Buffer.from(data.subarray(before + 1, end)) : undefined,
        torn: rest.length > 0 ? Buffer.from(rest) : undefined,
      };
    }
    if (window >= TAIL_LIMIT)
      throw execError(
        'EXEC_ERR_CONFIG',
        `the audit log ${path} has no line break in its last ${TAIL_LIMIT} bytes: not an audit log? Give --audit-log another file`,
      );
  }
}

/** The path the lock is named after: the same file reached by another name takes the same lock. */
async function canonical(path: string): Promise<string> {
  try {
    return await realpath(path);
  } catch {
    try {
      return join(await realpath(dirname(path)), basename(path));
    } catch (err) {
      throw execError('EXEC_ERR_CONFIG', `cannot open the audit log ${path}: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }
}

/**
 * Opens (creates) the log at `path` for appending, locked when it is a regular file (a device
 * such as /dev/stdout has no tail to continue and no file to lock). After a torn line, the first
 * write starts with a newline, so the next line is whole.
 */
export async function openLogFile(path: string): Promise<{ sink: Sink } & Tail> {
  const existing = await stat(path).catch(() => undefined);
  const lock = existing === undefined || existing.isFile() ? await lockLog(await canonical(path)) : undefined;
  let handle: FileHandle | undefined;
  try {
    handle = await open(path, 'a+', 0o600);
    const { size } = await handle.stat();
    const tail = size > 0 && existing?.isFile() !== false ? await readTail(handle, size, path) : undefined;
    return { sink: fileSink(handle, tail?.torn !== undefined, lock), last: tail?.last, torn: tail?.torn };
  } catch (err) {
    await handle?.close().catch(() => undefined);
    await lock?.release();
    throw err;
  }
}

/**
 * A write that fails part-way (disk full mid-batch) leaves the bytes that made it; the retry
 * writes the whole batch again, so those bytes are cut first: kept, they would glue a partial
 * line to a whole one, which `audit verify` reports as an edit. The log has one writer (the
 * lock), so the size before a write is where that write began. Only a regular file is cut: a
 * device (/dev/full) has no length.
 */
function fileSink(handle: FileHandle, afterTorn: boolean, lock: LogLock | undefined): Sink {
  let lead = afterTorn;
  /** Where a failed write began, while its bytes are still to be cut. */
  let cut: number | undefined;
  const cutBack = async (): Promise<void> => {
    if (cut === undefined) return;
    await handle.truncate(cut);
    cut = undefined;
  };
  return {
    write: async (bytes) => {
      await cutBack();
      const start = lock === undefined ? undefined : (await handle.stat()).size;
      try {
        await handle.appendFile(lead ? Buffer.concat([Buffer.from([NEWLINE]), bytes]) : bytes);
      } catch (err) {
        cut = start;
        // Cut now, so that a log that stays full does not keep the partial line meanwhile.
        await cutBack().catch(() => undefined);
        throw err;
      }
      lead = false;
    },
    close: async () => {
      try {
        await handle.close();
      } finally {
        await lock?.release();
      }
    },
  };
}
