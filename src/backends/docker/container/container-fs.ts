/**
 * `SessionFs` of a container. Metadata comes from the archive API's HEAD (one HTTP round trip,
 * no exec); everything else runs a small root shell script through an exec, because execs
 * stream both ways with backpressure: reads are `tail -c +N` piped out through the demuxer,
 * writes are `cat > file` fed through the hijacked stdin and half-closed at the end. (The
 * archive API's PUT needs each file's size in its tar header before the first byte, so an
 * upload of unknown length would have to be buffered or spooled: not bounded.)
 * Measurements are in docs/docker-backend.md.
 */
import { posix } from 'node:path';
import { Readable, Transform } from 'node:stream';
import type Docker from 'dockerode';
import { execError, ExecServerError, fromErrno } from '../../../errors.ts';
import { MAX_LISTING_ENTRIES, notRegularFile, tooManyEntries } from '../../fs-errors.ts';
import type { DirectoryEntry, FileMetadata, SessionFs } from '../../types.ts';
import { statusOf, withDeadline } from '../engine/engine-client.ts';
import type { ControlResult } from '../exec/exec-runner.ts';
import type { ControlRunner } from '../exec/control-runner.ts';

/** Error tokens the scripts print on stderr (first line), and what they mean. */
const ERRNO_BY_TEXT: ReadonlyArray<readonly [RegExp, string]> = [
  [/^ENOENT|No such file or directory/m, 'ENOENT'],
  [/^EACCES|Permission denied|Operation not permitted/m, 'EACCES'],
  [/^EROFS|Read-only file system/m, 'EROFS'],
  [/^EISDIR|Is a directory/m, 'EISDIR'],
  [/^ENOTDIR|Not a directory/m, 'ENOTDIR'],
  // glibc's and musl's words: images of either kind run these scripts.
  [/^ELOOP|Too many levels of symbolic links|Symbolic link loop/m, 'ELOOP'],
  [/^ENAMETOOLONG|File name too long|Filename too long/m, 'ENAMETOOLONG'],
  [/^EEXIST|File exists/m, 'EEXIST'],
  [/^ENOTEMPTY|Directory not empty/m, 'ENOTEMPTY'],
  [/^ENOSPC|No space left on device/m, 'ENOSPC'],
];

/** Maps a failed script to the registry, through `fromErrno` like the local backend. */
export function scriptError(result: ControlResult, what: string): ExecServerError {
  const text = result.stderr.trim();
  const match = ERRNO_BY_TEXT.find(([re]) => re.test(text));
  const code = match?.[1];
  if (/^ENOTREG/.test(text)) return notRegularFile(what);
  // A directory removed or copied without `recursive` (exit 4): the request's mistake, as on the
  // local backend; any other EISDIR goes through fromErrno like the rest.
  if (code === 'EISDIR' && result.exitCode === 4)
    return execError('EXEC_ERR_INVALID_REQUEST', `${what}: Is a directory (pass recursive)`, {
      detail: { errno: code },
    });
  // Errno-shaped on purpose (not shown as is): fromErrno turns it into the registry's error.
  const err = Object.assign(new Error(text.replace(/^E[A-Z]+\s*/, '') || `exit ${result.exitCode}`), { code });
  return fromErrno(err, what);
}

/** A missing `$1`: stat's errno text (ENOENT, ENOTDIR, ELOOP...) without the path, as the local backend names it. */
const MISSING = '[ -e "$1" ] || { e=$(stat -L -- "$1" 2>&1); echo "${e##*: }" >&2; exit 2; }';

const S = {
  /** lstat through an exec: raw mode (hex), size, mtime (s), then the link target if a symlink. */
  lstat: [
    // stat's own errno text, after the last ': ' (a name in the path cannot be mistaken for it).
    'out=$(stat -c "%f %s %Y" -- "$1" 2>&1) || { echo "${out##*: }" >&2; exit 2; }',
    'printf "%s\\n" "$out"',
    '[ ! -L "$1" ] || readlink -f -- "$1" || readlink -- "$1"',
  ].join('\n'),
  realpath: [
    'p=$1; rest=',
    'while [ ! -e "$p" ] && [ ! -L "$p" ] && [ "$p" != / ]; do rest="/${p##*/}$rest"; p=${p%/*}; [ -n "$p" ] || p=/; done',
    // A dangling link keeps its spelling (like a missing path); a loop is the caller's error.
    'r=$(realpath "$p" 2>&1) || { case ${r##*: } in *"ymbolic link"*) echo ELOOP >&2; exit 2;; esac; r=$p; }',
    'printf "%s%s" "$r" "$rest"',
  ].join('\n'),
  readFile: [
    MISSING,
    '[ -d "$1" ] && { echo EISDIR >&2; exit 2; }',
    '[ -f "$1" ] || { echo ENOTREG >&2; exit 2; }',
    's=$(stat -L -c %s -- "$1") || exit 2',
    '[ "$s" -le "$2" ] || { echo "ETOOBIG $s" >&2; exit 3; }',
    'exec head -c "$(($2 + 1))" -- "$1"',
  ].join('\n'),
  openRead: [
    MISSING,
    '[ -d "$1" ] && { echo EISDIR >&2; exit 2; }',
    '[ -f "$1" ] || { echo ENOTREG >&2; exit 2; }',
    'exec tail -c +"$(($2 + 1))" -- "$1"',
  ].join('\n'),
  write: [
    'd=${1%/*}; [ -n "$d" ] || d=/',
    '[ -d "$d" ] || { echo ENOENT >&2; cat >/dev/null; exit 2; }',
    '[ -d "$1" ] && { echo EISDIR >&2; cat >/dev/null; exit 2; }',
    '[ ! -e "$1" ] || [ -f "$1" ] || { echo ENOTREG >&2; cat >/dev/null; exit 2; }',
    'exec cat >"$1"',
  ].join('\n'),
  mkdir: [
    'if [ "$2" = 1 ]; then exec mkdir -p -- "$1"; fi',
    '[ -e "$1" ] && { echo EEXIST >&2; exit 2; }',
    'exec mkdir -- "$1"',
  ].join('\n'),
  readdir: [
    MISSING,
    '[ -d "$1" ] || { echo ENOTDIR >&2; exit 2; }',
    'cd -- "$1" || exit 2',
    'for f in * .[!.]* ..?*; do',
    '  [ -e "$f" ] || [ -L "$f" ] || continue',
    '  if [ -d "$f" ]; then t=d; elif [ -f "$f" ]; then t=f; else t=o; fi',
    '  printf "%s/%s\\0" "$t" "$f"',
    'done',
  ].join('\n'),
  remove: [
    'if [ ! -e "$1" ] && [ ! -L "$1" ]; then [ "$3" = 1 ] && exit 0; e=$(stat -- "$1" 2>&1); echo "${e##*: }" >&2; exit 2; fi',
    'if [ -d "$1" ] && [ ! -L "$1" ]; then',
    '  [ "$2" = 1 ] || { echo "$1: Is a directory (pass recursive)" >&2; exit 4; }',
    '  exec rm -rf -- "$1"',
    'fi',
    'exec rm -f -- "$1"',
  ].join('\n'),
  copy: [
    MISSING,
    'if [ -d "$1" ]; then',
    '  [ "$3" = 1 ] || { echo "$1: Is a directory (pass recursive)" >&2; exit 4; }',
    '  mkdir -p -- "$2" && exec cp -a -- "$1"/. "$2"/',
    'fi',
    'exec cp -a -- "$1" "$2"',
  ].join('\n'),
};

/** Stat record the engine returns in `X-Docker-Container-Path-Stat` (lstat semantics). */
interface PathStat {
  name: string;
  size: number;
  mode: number;
  mtime: string;
  linkTarget: string;
}
const MODE_DIR = 0x80000000;
const MODE_SYMLINK = 0x08000000;
/** Go's os.ModeType: every type bit; none set = regular file. */
const MODE_TYPE = 0x80000000 | 0x08000000 | 0x02000000 | 0x01000000 | 0x04000000 | 0x00200000 | 0x00080000;

/**
 * Mounts the archive API cannot see into (it reads the container's root filesystem on the
 * host): Docker's /dev (and /dev/shm), /proc and /sys, and /tmp, which gVisor makes a tmpfs inside its sandbox when the
 * image's /tmp is empty. A path there that the archive API does not find is asked again by exec.
 */
const TMPFS_PATHS = ['/tmp', '/dev', '/proc', '/sys'] as const;
const inTmpfs = (path: string): boolean => TMPFS_PATHS.some((m) => path === m || path.startsWith(`${m}/`));

/** `stat -c '%f %s %Y'` (+ link target) as the archive API's stat record. */
function parseLstat(path: string, out: string): PathStat {
  const [line = '', target = ''] = out.split('\n');
  const [hex = '0', size = '0', mtime = '0'] = line.trim().split(' ');
  const raw = Number.parseInt(hex, 16);
  const fmt = raw & 0o170000;
  const type = fmt === 0o040000 ? MODE_DIR : fmt === 0o120000 ? MODE_SYMLINK : fmt === 0o100000 ? 0 : 0x04000000;
  return {
    name: path.slice(path.lastIndexOf('/') + 1),
    size: Number(size),
    mode: (type | (raw & 0o7777)) >>> 0,
    mtime: new Date(Number(mtime) * 1000).toISOString(),
    linkTarget: target,
  };
}

/** What a container's filesystem calls use: the container, and how they run their scripts. */
export interface ContainerFsHost {
  readonly container: Docker.Container;
  /** Runs the filesystem's small scripts (through the exec agent when the session has one). */
  readonly runner: ControlRunner;
  readonly timeoutMs: number;
  /** Called before anything that creates or changes files (the sandbox must re-own them). */
  mutated(): void;
}

/** Runs one of the filesystem's scripts; its stdout, or its failure mapped to the registry. */
async function runScript(
  host: ContainerFsHost,
  what: string,
  script: string,
  args: string[],
  extra?: { stdin?: NodeJS.ReadableStream; maxStdout?: number },
): Promise<Buffer> {
  const result = await host.runner.run({
    cmd: ['/bin/sh', '-c', script, 'sh', ...args],
    timeoutMs: host.timeoutMs,
    stdin: extra?.stdin,
    maxStdout: extra?.maxStdout,
  });
  if (result.exitCode !== 0) throw scriptError(result, what);
  return result.stdout;
}

/** The engine's stat of `path` (not following a last link); in a tmpfs, which the engine cannot see, by a script. */
async function pathStat(host: ContainerFsHost, path: string): Promise<PathStat> {
  const res = await withDeadline(
    `stat ${path}`,
    host.timeoutMs,
    (abortSignal) => host.container.infoArchive({ path, abortSignal }) as Promise<unknown>,
  ).catch(async (err: unknown) => {
    const status = statusOf((err as ExecServerError).cause);
    // The engine answers a path through a symlink loop or through a file with a bare 500: ask
    // the container itself, whose stat names the errno (ELOOP, ENOTDIR...) as the local backend does.
    if (status === 500)
      return { fromExec: parseLstat(path, (await runScript(host, path, S.lstat, [path])).toString('utf8')) };
    if (status !== 404) throw err;
    if (inTmpfs(posix.normalize(path)))
      return { fromExec: parseLstat(path, (await runScript(host, path, S.lstat, [path])).toString('utf8')) };
    throw execError('EXEC_ERR_NOT_FOUND', `${path}: No such file or directory`, { cause: err });
  });
  if ((res as { fromExec?: PathStat }).fromExec !== undefined) return (res as { fromExec: PathStat }).fromExec;
  const msg = res as NodeJS.ReadableStream & { headers?: Record<string, string> };
  msg.resume?.();
  const header = msg.headers?.['x-docker-container-path-stat'];
  if (header === undefined) throw execError('EXEC_ERR_BACKEND', `stat ${path}: engine sent no path stat`);
  return JSON.parse(Buffer.from(header, 'base64').toString('utf8')) as PathStat;
}

/** A whole file, refused past `maxBytes`. */
async function readFileIn(host: ContainerFsHost, path: string, maxBytes: number): Promise<Buffer> {
  const result = await host.runner
    .run({
      cmd: ['/bin/sh', '-c', S.readFile, 'sh', path, String(maxBytes)],
      timeoutMs: host.timeoutMs,
      maxStdout: maxBytes + 1,
    })
    .catch((err: unknown) => {
      if (err instanceof ExecServerError && err.code === 'EXEC_ERR_TOO_LARGE') throw tooLarge(path, maxBytes);
      throw err;
    });
  if (result.exitCode === 3) throw tooLarge(path, maxBytes);
  if (result.exitCode === 2 && /^EISDIR/.test(result.stderr))
    throw execError('EXEC_ERR_INVALID_REQUEST', `${path}: Is a directory`);
  if (result.exitCode !== 0) throw scriptError(result, path);
  if (result.stdout.length > maxBytes) throw tooLarge(path, maxBytes);
  return result.stdout;
}

/** The readdir script's records: a type letter, a space, the name; NUL-separated. */
function directoryEntries(out: Buffer): DirectoryEntry[] {
  const entries: DirectoryEntry[] = [];
  for (const rec of out.toString('utf8').split('\0')) {
    if (rec.length < 3) continue;
    const type = rec[0];
    entries.push({ fileName: rec.slice(2), isDirectory: type === 'd', isFile: type === 'f' });
  }
  return entries;
}

/** A directory's entries, at most MAX_LISTING_ENTRIES of them. */
async function listDirectory(host: ContainerFsHost, path: string): Promise<DirectoryEntry[]> {
  // Names are at most 255 bytes: past that output there are more entries than answered anyway.
  const out = await runScript(host, path, S.readdir, [path], { maxStdout: MAX_LISTING_ENTRIES * 258 }).catch(
    (err: unknown) => {
      throw err instanceof ExecServerError && err.code === 'EXEC_ERR_TOO_LARGE' ? tooManyEntries(path) : err;
    },
  );
  const entries = directoryEntries(out);
  if (entries.length > MAX_LISTING_ENTRIES) throw tooManyEntries(path);
  return entries;
}

/** The `SessionFs` of a container: metadata through the archive API, the rest through small scripts. */
export function createContainerFs(host: ContainerFsHost): SessionFs {
  return {
    async realpath(path) {
      const out = posix.normalize((await runScript(host, path, S.realpath, [posix.normalize(path)])).toString('utf8'));
      // `f/` names `f`, as the local backend's realpath resolves it: every operation then agrees.
      return out.length > 1 && out.endsWith('/') ? out.slice(0, -1) : out;
    },

    async stat(path): Promise<FileMetadata> {
      const link = await pathStat(host, path);
      const isSymlink = (link.mode & MODE_SYMLINK) !== 0;
      // Like stat(2) for type and size; a dangling link reports itself.
      const target =
        isSymlink && link.linkTarget !== '' ? await pathStat(host, link.linkTarget).catch(() => link) : link;
      const mtime = Date.parse(target.mtime);
      return {
        isDirectory: (target.mode & MODE_DIR) !== 0,
        isFile: (target.mode & MODE_TYPE) === 0,
        isSymlink,
        size: target.size,
        createdAtMs: mtime,
        modifiedAtMs: mtime,
      };
    },

    readFile: (path, maxBytes) => readFileIn(host, path, maxBytes),

    async openRead(path, offset) {
      // Checked first so that open errors are thrown here, not as a broken stream later.
      const info = await this.stat(path);
      if (info.isDirectory) throw execError('EXEC_ERR_INVALID_REQUEST', `${path}: Is a directory`);
      if (!info.isFile) throw notRegularFile(path);
      const { stdout } = await host.runner.stream({
        cmd: ['/bin/sh', '-c', S.openRead, 'sh', path, String(Math.max(0, Math.trunc(offset)))],
        timeoutMs: host.timeoutMs,
        failure: (r) => (r.exitCode === 0 ? undefined : scriptError(r, path)),
      });
      return stdout;
    },

    async writeFile(path, data) {
      host.mutated();
      await runScript(host, path, S.write, [path], { stdin: bufferStream(data) });
    },

    async writeStream(path, source) {
      host.mutated();
      let bytes = 0;
      const counter = new Transform({
        transform(chunk: Buffer, _enc, cb) {
          bytes += chunk.length;
          cb(null, chunk);
        },
      });
      source.on('error', (err: Error) => counter.destroy(err));
      await runScript(host, path, S.write, [path], { stdin: source.pipe(counter) });
      return bytes;
    },

    async createDirectory(path, recursive) {
      host.mutated();
      await runScript(host, path, S.mkdir, [path, recursive ? '1' : '0']);
    },

    readDirectory: (path) => listDirectory(host, path),

    async remove(path, recursive, force) {
      host.mutated();
      await runScript(host, path, S.remove, [path, recursive ? '1' : '0', force ? '1' : '0']);
    },

    async copy(source, destination, recursive) {
      host.mutated();
      await runScript(host, source, S.copy, [source, destination, recursive ? '1' : '0']);
    },
  };
}

function tooLarge(path: string, maxBytes: number): ExecServerError {
  return execError(
    'EXEC_ERR_TOO_LARGE',
    `${path} is more than the ${maxBytes}-byte limit of fs/readFile; use fs/open and fs/readBlock`,
  );
}

function bufferStream(data: Buffer): NodeJS.ReadableStream {
  return Readable.from(data.length === 0 ? [] : [data]);
}
