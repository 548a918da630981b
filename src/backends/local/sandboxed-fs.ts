/**
 * A local session's file operations as its sandboxed commands see the filesystem.
 *
 * The server does them as itself (root, usually), so without this a session's `fs/readFile`
 * read what no sandboxed command of it could (`/etc/shadow`), wrote root-owned files its
 * commands could not change afterwards, and saw the host's `/tmp` instead of the session's.
 * Here, for a session whose commands run sandboxed: reads are refused where the session's
 * sandbox user could not read (its uid and gid against each file's mode and every parent's
 * search bit; ACLs are not consulted), files and directories the server creates in the
 * workspace or the private /tmp are handed to the sandbox user, and `/tmp/...` means the
 * session's private /tmp (except where the workspace itself lies under /tmp).
 */
import { execFile } from 'node:child_process';
import { lchown, lstat, readdir, stat } from 'node:fs/promises';
import { dirname, posix } from 'node:path';
import { promisify } from 'node:util';
import { execError, ExecServerError } from '../../errors.ts';
import type { SessionFs } from '../types.ts';
import { isWithin } from '../../path-within.ts';

const run = promisify(execFile);

/** Who a session's sandboxed commands are, and whether files the server makes must become theirs. */
export interface SandboxView {
  /** The sandbox user; undefined: the server's own (the kernel checks then). */
  readonly user: { readonly uid: number; readonly gid: number } | undefined;
  /** Whether files the server makes in the workspace must be handed to the sandbox user. */
  readonly handOver: boolean;
  readonly workdir: string;
  readonly privateTmp: string;
  /** The client's directories: host paths in every view, also under /tmp (client-dirs.ts). */
  readonly clientDirs?: { covers(path: string): boolean } | undefined;
}

function mayAccess(
  st: { uid: number; gid: number; mode: number },
  user: { uid: number; gid: number },
  bit: number,
): boolean {
  if (st.uid === user.uid) return (st.mode & (bit << 6)) !== 0;
  if (st.gid === user.gid) return (st.mode & (bit << 3)) !== 0;
  return (st.mode & bit) !== 0;
}

/** The host path of a path as the sandbox sees it: its /tmp is the session's private one. */
function toHost(view: SandboxView, p: string): string {
  if (!isWithin(p, '/tmp') || isWithin(p, view.workdir) || view.clientDirs?.covers(p)) return p;
  return posix.join(view.privateTmp, posix.relative('/tmp', p));
}

/** The path the sandbox sees for a host path (the inverse of toHost). */
function fromHost(view: SandboxView, p: string): string {
  return isWithin(p, view.privateTmp) ? posix.join('/tmp', posix.relative(view.privateTmp, p)) : p;
}

/** Refuses `path` unless the sandbox user could open it for reading (every parent searchable). */
async function checkRead(view: SandboxView, host: string, shown: string): Promise<void> {
  const user = view.user;
  if (!user) return;
  const denied = (): never => {
    throw execError('EXEC_ERR_FS_DENIED', `${shown}: permission denied (not readable by the session's sandbox user)`, {
      detail: { path: shown },
    });
  };
  for (let dir = dirname(host); ; dir = dirname(dir)) {
    const st = await stat(dir).catch(() => undefined);
    // A file as a parent is not a denial: the operation then fails with ENOTDIR, as on docker.
    if (st?.isDirectory() && !mayAccess(st, user, 1)) denied();
    if (dir === '/') break;
  }
  const st = await stat(host).catch(() => undefined);
  if (st && !mayAccess(st, user, st.isDirectory() ? 5 : 4)) denied();
}

/**
 * Refuses a recursive copy of `host` (a directory the sandbox user may read) if anything below it
 * is not readable by that user: the server copies as root and hands the copy over, so a file
 * closed to the user in an open directory (`/etc/shadow` in `/etc`) became the user's to read.
 * Symbolic links are copied as links and need nothing.
 */
async function checkReadTree(view: SandboxView, host: string, shown: string): Promise<void> {
  const user = view.user;
  if (!user || !(await lstat(host).catch(() => undefined))?.isDirectory()) return;
  const dirs = [host];
  for (let dir = dirs.pop(); dir !== undefined; dir = dirs.pop()) {
    for (const name of await readdir(dir).catch(() => [])) {
      const path = posix.join(dir, name);
      const st = await lstat(path).catch(() => undefined);
      if (!st || st.isSymbolicLink()) continue;
      if (!mayAccess(st, user, st.isDirectory() ? 5 : 4))
        throw execError(
          'EXEC_ERR_FS_DENIED',
          `${shown}: permission denied (${fromHost(view, path)} in it is not readable by the session's sandbox user)`,
          { detail: { path: shown } },
        );
      if (st.isDirectory()) dirs.push(path);
    }
  }
}

/** Whether what the server makes at `host` must be the sandbox user's: in the workspace, the
 * private /tmp, or a client directory lent to that user (its parent is the user's). */
async function owned(view: SandboxView, host: string): Promise<boolean> {
  if (!view.handOver || view.user === undefined) return false;
  if (isWithin(host, view.workdir) || isWithin(host, view.privateTmp)) return true;
  if (!view.clientDirs?.covers(host)) return false;
  for (let dir = dirname(host); ; dir = dirname(dir)) {
    const st = await stat(dir).catch(() => undefined);
    if (st) return st.uid === view.user.uid;
    if (dir === dirname(dir)) return false;
  }
}

/**
 * Refuses a change at `host` the sandbox user could not make itself (write and search bits of the
 * directory the entry is, or would be, made in, and of an existing file to be overwritten), but
 * in the user's own places, whose new entries the server hands over. The server writes as root:
 * without this, a writable root the user cannot write (a system directory named as the session's
 * workdir or a writable root, which is never lent) took files from fs calls all the same.
 */
async function checkWrite(view: SandboxView, host: string, shown: string, overwrite: boolean): Promise<void> {
  const user = view.user;
  if (!user || (await owned(view, host))) return;
  const denied = (): never => {
    throw execError('EXEC_ERR_FS_DENIED', `${shown}: permission denied (not writable by the session's sandbox user)`, {
      detail: { path: shown },
    });
  };
  const st = await lstat(host).catch(() => undefined);
  if (overwrite && st?.isFile() && !mayAccess(st, user, 2)) denied();
  let dir = dirname(host);
  for (; dir !== '/' && !(await stat(dir).catch(() => undefined)); dir = dirname(dir));
  const parent = await stat(dir).catch(() => undefined);
  if (!parent || !mayAccess(parent, user, 2) || !mayAccess(parent, user, 1)) denied();
  await checkRead(view, dir, shown);
}

async function handOver(view: SandboxView, host: string): Promise<void> {
  if (await owned(view, host)) await lchown(host, view.user!.uid, view.user!.gid).catch(() => undefined);
}
/** The directories `mkdir -p host` is about to create, outermost first. */
async function missingDirs(host: string): Promise<string[]> {
  const missing: string[] = [];
  for (let dir = host; dir !== dirname(dir); dir = dirname(dir)) {
    if (
      await lstat(dir).then(
        () => true,
        () => false,
      )
    )
      break;
    missing.unshift(dir);
  }
  return missing;
}

/**
 * `text` with the host path of the private /tmp written as the session's `/tmp`. The base
 * filesystem names host paths in its errors; shown as they were, they told a client where the
 * server keeps the session's /tmp (inside the workspace root) instead of the path it asked for.
 */
function hideHostTmp(view: SandboxView, text: string): string {
  const escaped = view.privateTmp.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  // Not followed by a name character: `<privateTmp>.accounts` is another file, not under /tmp.
  return text.replace(new RegExp(`${escaped}(?![\\w.-])`, 'g'), '/tmp');
}

/** An error of the base filesystem as the session sees it (`hideHostTmp` on its message and detail). */
function inView(view: SandboxView, err: unknown): unknown {
  if (!(err instanceof ExecServerError)) return err;
  const message = hideHostTmp(view, err.message);
  const detail =
    err.detail &&
    Object.fromEntries(
      Object.entries(err.detail).map(([k, v]) => [k, typeof v === 'string' ? hideHostTmp(view, v) : v]),
    );
  if (message === err.message && JSON.stringify(detail) === JSON.stringify(err.detail)) return err;
  return execError(err.code, message, { cause: err, ...(detail === undefined ? {} : { detail }) });
}

/** `base` as the session's sandboxed commands see the filesystem: their permissions, their /tmp. */
export function sandboxedFs(base: SessionFs, view: SandboxView): SessionFs {
  const fs = hostFs(base, view);
  const shown =
    <A extends unknown[], R>(fn: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      try {
        return await fn(...args);
      } catch (err) {
        throw inView(view, err);
      }
    };
  return {
    realpath: shown(fs.realpath),
    stat: shown(fs.stat),
    readFile: shown(fs.readFile),
    openRead: shown(fs.openRead),
    writeFile: shown(fs.writeFile),
    writeStream: shown(fs.writeStream),
    createDirectory: shown(fs.createDirectory),
    readDirectory: shown(fs.readDirectory),
    remove: shown(fs.remove),
    copy: shown(fs.copy),
  };
}

/** The operations on the host paths of the session's view; errors still name host paths. */
function hostFs(base: SessionFs, view: SandboxView): SessionFs {
  return {
    async realpath(path) {
      return fromHost(view, await base.realpath(toHost(view, path)));
    },
    stat: (path) => base.stat(toHost(view, path)),
    async readFile(path, maxBytes) {
      await checkRead(view, toHost(view, path), path);
      return base.readFile(toHost(view, path), maxBytes);
    },
    async openRead(path, offset) {
      await checkRead(view, toHost(view, path), path);
      return base.openRead(toHost(view, path), offset);
    },
    async writeFile(path, data) {
      await checkWrite(view, toHost(view, path), path, true);
      await base.writeFile(toHost(view, path), data);
      await handOver(view, toHost(view, path));
    },
    async writeStream(path, source) {
      await checkWrite(view, toHost(view, path), path, true);
      const n = await base.writeStream(toHost(view, path), source);
      await handOver(view, toHost(view, path));
      return n;
    },
    async createDirectory(path, recursive) {
      const host = toHost(view, path);
      await checkWrite(view, host, path, false);
      const made = (await owned(view, host)) ? await missingDirs(host) : [];
      await base.createDirectory(host, recursive);
      for (const dir of made) await handOver(view, dir);
    },
    async readDirectory(path) {
      await checkRead(view, toHost(view, path), path);
      return base.readDirectory(toHost(view, path));
    },
    async remove(path, recursive, force) {
      await checkWrite(view, toHost(view, path), path, false);
      return base.remove(toHost(view, path), recursive, force);
    },
    async copy(source, destination, recursive) {
      await checkRead(view, toHost(view, source), source);
      if (recursive) await checkReadTree(view, toHost(view, source), source);
      const dest = toHost(view, destination);
      await checkWrite(view, dest, destination, true);
      await base.copy(toHost(view, source), dest, recursive);
      if (await owned(view, dest))
        await run('chown', ['-Rh', `${view.user!.uid}:${view.user!.gid}`, '--', dest]).catch(() => undefined);
    },
  };
}
