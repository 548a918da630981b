/** `SessionFs` on the host filesystem (node:fs). Sandbox checks happen above, on canonical paths. */
import { constants, type Dirent, type Stats } from 'node:fs';
import { cp, type FileHandle, lstat, mkdir, open, opendir, realpath, rm, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { execError, type ExecServerError, fromErrno } from '../../errors.ts';
import { MAX_LISTING_ENTRIES, notRegularFile, tooManyEntries } from '../fs-errors.ts';
import type { DirectoryEntry, FileMetadata, SessionFs } from '../types.ts';

async function wrap<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw fromErrno(err, what);
  }
}

/** A directory removed or copied without `recursive`: the request's mistake (docs/filesystem.md). */
function notRecursive(path: string): ExecServerError {
  return execError('EXEC_ERR_INVALID_REQUEST', `${path}: Is a directory (pass recursive)`, {
    detail: { errno: 'EISDIR' },
  });
}

/**
 * Opening a FIFO for reading blocks until a writer comes (for writing, until a reader does), and
 * it blocks a thread of libuv's small pool: a few such calls stalled every file operation of the
 * server. Non-blocking opens return at once; the type is then checked on the descriptor.
 */
const READ_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK;
const WRITE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NONBLOCK;

/** An existing `path` that is not a regular file or a directory (the write then reports the directory). */
async function refuseSpecial(path: string): Promise<void> {
  const info = await stat(path).catch(() => undefined);
  if (info && !info.isFile() && !info.isDirectory()) throw notRegularFile(path);
}

/** `path` opened for reading once it is known to be a regular file, with what its descriptor says. */
async function openRegular(path: string): Promise<{ handle: FileHandle; info: Stats }> {
  await refuseSpecial(path);
  const handle = await open(path, READ_FLAGS);
  try {
    const info = await handle.stat();
    if (info.isDirectory()) throw execError('EXEC_ERR_INVALID_REQUEST', `${path}: Is a directory`);
    if (!info.isFile()) throw notRegularFile(path);
    return { handle, info };
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/** The host filesystem as a `SessionFs`; the sandbox checks are above it. */
export const localFs: SessionFs = {
  async realpath(path) {
    const missing: string[] = [];
    let current = path;
    for (;;) {
      try {
        return join(await realpath(current), ...missing.reverse());
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if ((code !== 'ENOENT' && code !== 'ENOTDIR') || dirname(current) === current) throw fromErrno(err, path);
        missing.push(basename(current));
        current = dirname(current);
      }
    }
  },
  stat: (path) =>
    wrap(path, async (): Promise<FileMetadata> => {
      const link = await lstat(path);
      const target = link.isSymbolicLink() ? await stat(path).catch(() => link) : link;
      return {
        isDirectory: target.isDirectory(),
        isFile: target.isFile(),
        isSymlink: link.isSymbolicLink(),
        size: target.size,
        createdAtMs: Math.trunc(target.birthtimeMs || target.ctimeMs),
        modifiedAtMs: Math.trunc(target.mtimeMs),
      };
    }),
  readFile: (path, maxBytes) =>
    wrap(path, async () => {
      const { handle, info } = await openRegular(path);
      try {
        if (info.size > maxBytes)
          throw execError(
            'EXEC_ERR_TOO_LARGE',
            `${path} is ${info.size} bytes, more than the ${maxBytes}-byte limit of fs/readFile; use fs/open and fs/readBlock`,
          );
        // Read at most maxBytes+1 so a file that grows while we read still cannot exceed the bound.
        // A size of 0 is also what /proc and /sys files report: read those until EOF.
        let buf = Buffer.alloc(Math.min(maxBytes + 1, info.size > 0 ? info.size + 1 : 64 * 1024));
        let total = 0;
        for (;;) {
          if (total === buf.length) {
            if (info.size > 0 || buf.length > maxBytes) break;
            const bigger = Buffer.alloc(Math.min(maxBytes + 1, buf.length * 2));
            buf.copy(bigger, 0, 0, total);
            buf = bigger;
          }
          const { bytesRead } = await handle.read(buf, total, buf.length - total, info.size > 0 ? total : null);
          if (bytesRead === 0) break;
          total += bytesRead;
          if (total > maxBytes)
            throw execError('EXEC_ERR_TOO_LARGE', `${path} grew past the ${maxBytes}-byte limit of fs/readFile`);
        }
        return buf.subarray(0, total);
      } finally {
        await handle.close();
      }
    }),
  openRead: (path, offset) =>
    wrap(path, async () => {
      const { handle } = await openRegular(path);
      return handle.createReadStream({ start: offset });
    }),
  writeFile: (path, data) =>
    wrap(path, async () => {
      await refuseSpecial(path);
      await writeFile(path, data, { flag: WRITE_FLAGS });
    }),
  writeStream: (path, source) =>
    wrap(path, async () => {
      await refuseSpecial(path);
      const out = (await open(path, WRITE_FLAGS)).createWriteStream();
      await pipeline(source, out);
      return out.bytesWritten;
    }),
  createDirectory: (path, recursive) => wrap(path, async () => void (await mkdir(path, { recursive }))),
  readDirectory: (path) =>
    wrap(path, async (): Promise<DirectoryEntry[]> => {
      const entries: Dirent[] = [];
      // One entry at a time: a huge directory is refused without being read whole.
      for await (const e of await opendir(path)) {
        if (entries.length === MAX_LISTING_ENTRIES) throw tooManyEntries(path);
        entries.push(e);
      }
      return Promise.all(
        entries.map(async (e) => {
          if (!e.isSymbolicLink()) return { fileName: e.name, isDirectory: e.isDirectory(), isFile: e.isFile() };
          const target = await stat(join(path, e.name)).catch(() => undefined);
          return { fileName: e.name, isDirectory: target?.isDirectory() ?? false, isFile: target?.isFile() ?? false };
        }),
      );
    }),
  remove: (path, recursive, force) =>
    wrap(path, async () => {
      if (!force) await lstat(path);
      const info = await lstat(path).catch(() => undefined);
      if (info?.isDirectory() && !recursive) throw notRecursive(path);
      await rm(path, { recursive, force });
    }),
  copy: (source, destination, recursive) =>
    wrap(source, async () => {
      const info = await stat(source);
      if (info.isDirectory() && !recursive) throw notRecursive(source);
      await cp(source, destination, {
        recursive,
        dereference: false,
        errorOnExist: false,
        force: true,
        verbatimSymlinks: true,
      });
    }),
};
