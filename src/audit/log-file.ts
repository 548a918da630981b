/**
 * The audit log as a file: locked to one writer (log-lock.ts), appended to, and read back at
 * its end for the line a restarted server's chain goes on from. That read finds the last
 * complete line whatever its length (a line is at most `MAX_LINE_BYTES`, line-bound.ts; a log
 * of an earlier version may hold longer ones) and what follows it when the file does not end
 * with a newline: a line torn by a crash mid-write, which the new `audit.start` declares.
 *
 * A file log is rotated by size (`--audit-log-max-bytes`): the file becomes `PATH.1`, older ones
 * move up to `PATH.2`... (past `--audit-log-max-files` removed), and the chain goes on in a new
 * `PATH` whose first line is `audit.rotate` (audit-log.ts). A server that finds `PATH` missing or
 * empty goes on from the last line of `PATH.1`, so a crash right after a rotation keeps the chain.
 * A rotation that failed part-way (a rename refused) leaves a gap in the numbers; the next
 * attempt closes it, so the rotated files are always numbered on from 1, oldest highest.
 */
import { lstat, open, readdir, realpath, rename, stat, unlink, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { execError } from '../errors.ts';
import { MAX_LINE_BYTES } from './line-bound.ts';
import { lockLog, type LogLock } from './log-lock.ts';

/** Where the audit lines go: the bytes of whole lines, in order. */
export interface Sink {
  write(bytes: Buffer): Promise<void>;
  /** Files only: the current file becomes `PATH.1` and the next write starts a new `PATH`. */
  rotate?(): Promise<void>;
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
export async function openLogFile(
  path: string,
  maxFiles = 0,
  fs: RotationFs = ROTATION_FS,
): Promise<{ sink: Sink; readonly size: number; readonly afterRotation: boolean } & Tail> {
  const existing = await stat(path).catch(() => undefined);
  const lock = existing === undefined || existing.isFile() ? await lockLog(await canonical(path)) : undefined;
  let handle: FileHandle | undefined;
  try {
    handle = await open(path, 'a+', 0o600);
    const { size } = await handle.stat();
    const isFile = existing?.isFile() !== false;
    const tail = size > 0 && isFile ? await readTail(handle, size, path) : undefined;
    const previous = size === 0 && isFile ? await rotatedLast(path) : undefined;
    const rotation = lock === undefined ? undefined : { path, maxFiles, fs };
    return {
      sink: fileSink(handle, tail?.torn !== undefined, lock, rotation),
      size,
      last: tail?.last ?? previous,
      torn: tail?.torn,
      afterRotation: previous !== undefined,
    };
  } catch (err) {
    await handle?.close().catch(() => undefined);
    await lock?.release();
    throw err;
  }
}

/** The last complete line of `PATH.1`, where a chain cut by a crash right after a rotation goes on. */
async function rotatedLast(path: string): Promise<Buffer | undefined> {
  const handle = await open(`${path}.1`, 'r').catch(() => undefined);
  if (handle === undefined) return undefined;
  try {
    const { size } = await handle.stat();
    return size > 0 ? (await readTail(handle, size, `${path}.1`)).last : undefined;
  } finally {
    await handle.close();
  }
}

/** The file operations of a rotation (where a test makes one of them fail). */
export interface RotationFs {
  readdir(dir: string): Promise<string[]>;
  rename(from: string, to: string): Promise<void>;
  unlink(path: string): Promise<void>;
  /** Whether the name is taken (by anything, a dangling link too). */
  exists(path: string): Promise<boolean>;
}

export const ROTATION_FS: RotationFs = {
  readdir: (dir) => readdir(dir),
  rename,
  unlink,
  exists: (path) =>
    lstat(path).then(
      () => true,
      () => false,
    ),
};

/** The numbers N of the rotated files `PATH.N` next to `path`, lowest (newest) first. */
async function rotatedNumbers(path: string, fs: RotationFs): Promise<number[]> {
  const prefix = `${basename(path)}.`;
  const numbers: number[] = [];
  for (const name of await fs.readdir(dirname(path))) {
    const n = name.startsWith(prefix) ? name.slice(prefix.length) : '';
    if (/^[1-9][0-9]{0,8}$/.test(n)) numbers.push(Number(n));
  }
  return numbers.sort((a, b) => a - b);
}

/**
 * What a rotation does with the rotated files numbered `have`: the newest becomes `first` (2
 * when `PATH` is to become `PATH.1`, else 1), the next `first + 1` and so on, so a gap left by
 * an earlier attempt that failed part-way is closed; those past `maxFiles` (0: none) are removed.
 * The moves are ordered so that none lands on a name still in use: a file's new number minus
 * its old one only grows from the newest to the oldest, so the files moving down (to close a
 * gap) go first, lowest first, then those moving up, highest first.
 */
export function rotationPlan(
  have: readonly number[],
  first: number,
  maxFiles: number,
): { remove: number[]; moves: [from: number, to: number][] } {
  const sorted = [...have].sort((a, b) => a - b);
  const kept = sorted.filter((_, i) => maxFiles === 0 || first + i <= maxFiles);
  const remove = sorted.slice(kept.length).reverse();
  const pairs = kept.map((n, i): [number, number] => [n, first + i]);
  const down = pairs.filter(([from, to]) => to < from);
  const up = pairs.filter(([from, to]) => to > from).reverse();
  return { remove, moves: [...down, ...up] };
}

/**
 * Moves the rotated files along (rotationPlan) and `PATH` to `PATH.1`. Each attempt plans from
 * what is there, so one that fails part-way is finished by the next; a move never replaces a
 * file (a name found taken fails the attempt, and the next plans around it).
 */
export async function shiftRotated(path: string, maxFiles: number, fs: RotationFs = ROTATION_FS): Promise<void> {
  // After a rotation that failed between the last rename and the new file, there is no PATH to move.
  const current = await fs.exists(path);
  const plan = rotationPlan(await rotatedNumbers(path, fs), current ? 2 : 1, maxFiles);
  for (const n of plan.remove) await fs.unlink(`${path}.${n}`);
  for (const [from, to] of plan.moves) await moveFree(fs, `${path}.${from}`, `${path}.${to}`);
  if (current) await moveFree(fs, path, `${path}.1`);
}

/** A rename that never replaces a file: the single writer (the lock) makes the check enough. */
async function moveFree(fs: RotationFs, from: string, to: string): Promise<void> {
  if (await fs.exists(to))
    throw execError('EXEC_ERR_FS', `cannot rotate the audit log: ${to} exists, ${from} was not moved onto it`);
  await fs.rename(from, to);
}

/**
 * A write that fails part-way (disk full mid-batch) leaves the bytes that made it; the retry
 * writes the whole batch again, so those bytes are cut first: kept, they would glue a partial
 * line to a whole one, which `audit verify` reports as an edit. The log has one writer (the
 * lock), so the size before a write is where that write began. Only a regular file is cut: a
 * device (/dev/full) has no length.
 */
function fileSink(
  first: FileHandle,
  afterTorn: boolean,
  lock: LogLock | undefined,
  rotation: { readonly path: string; readonly maxFiles: number; readonly fs: RotationFs } | undefined,
): Sink {
  let handle = first;
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
    ...(rotation === undefined
      ? {}
      : {
          rotate: async () => {
            await cutBack();
            await shiftRotated(rotation.path, rotation.maxFiles, rotation.fs);
            // The old handle writes the renamed file until the new one is open: no write is lost.
            const next = await open(rotation.path, 'a+', 0o600);
            const old = handle;
            handle = next;
            lead = false;
            await old.close().catch(() => undefined);
          },
        }),
    close: async () => {
      try {
        await handle.close();
      } finally {
        await lock?.release();
      }
    },
  };
}
