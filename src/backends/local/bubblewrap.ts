/**
 * The local backend's sandbox: bubblewrap (`bwrap`, Debian package `bubblewrap`).
 * A read-only view of the whole filesystem, the writable roots bound read-write, a private
 * `/tmp` per session, deny-read paths covered by an unreadable placeholder, a PID namespace of
 * its own (a fresh /proc that shows only the sandbox's processes), its own System V IPC, no
 * network unless granted, and every capability dropped. The command runs as its session's
 * user where the server is root (sandbox-users.ts, native/sandbox-join.c).
 */
import { existsSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { chmod, lstat, mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { posix } from 'node:path';
import { promisify } from 'node:util';
import type { ResolvedSandbox } from '../types.ts';
import { ownerTag } from './placeholder-owners.ts';
import type { SandboxAccounts } from './sandbox-accounts.ts';
import { isWithin } from '../../path-within.ts';

const run = promisify(execFile);

/** Whether bubblewrap can sandbox here, found once at startup: sessions fall back to no sandbox when not. */
export interface BubblewrapProbe {
  readonly available: boolean;
  readonly path: string;
  /** Why it is unavailable (missing binary, or it fails to start a sandbox here). */
  readonly reason?: string | undefined;
}

/** What every sandbox starts from: the host read-only, a /dev and /proc of its own, its own PIDs. */
export const SANDBOX_BASE: readonly string[] = [
  '--ro-bind',
  '/',
  '/',
  '--dev',
  '/dev',
  '--proc',
  '/proc',
  '--unshare-pid',
];

/**
 * Checks that `bwrap` exists and can really start a sandbox on this host. A missing binary is
 * final; any other failure is tried again (up to `attempts`), because a host under load can time
 * out or fail one start, and a wrong "unavailable" would run every session of this server
 * without its sandbox.
 */
export async function probeBubblewrap(path = 'bwrap', attempts = 3): Promise<BubblewrapProbe> {
  let reason = '';
  for (let attempt = 1; attempt <= attempts; attempt++) {
    try {
      await run(path, [...SANDBOX_BASE, '--unshare-net', '--cap-drop', 'ALL', '--', 'true'], {
        timeout: 10_000 * attempt,
      });
      return { available: true, path };
    } catch (err) {
      const e = err as NodeJS.ErrnoException & { stderr?: string };
      if (e.code === 'ENOENT')
        return { available: false, path, reason: 'bwrap is not installed (Debian package bubblewrap)' };
      reason = `bwrap cannot start a sandbox here: ${(e.stderr ?? e.message).trim()}`;
      if (attempt < attempts) await new Promise((r) => setTimeout(r, 250 * attempt));
    }
  }
  return { available: false, path, reason };
}

/**
 * Unreadable placeholders bound over deny-read paths: an empty file and an empty directory,
 * mode 000, in a directory of their own that only the server's user can enter. Sandboxed
 * commands run as another user (they can neither chmod, write nor remove them), the directory
 * is bound read-only into every sandbox that could otherwise write it, and a placeholder that
 * went missing or changed (an unsandboxed command can do anything) is made again before use.
 */
export class DenyPlaceholders {
  readonly root: string;
  readonly file: string;
  readonly dir: string;

  private constructor(root: string) {
    this.root = root;
    this.file = posix.join(root, 'file');
    this.dir = posix.join(root, 'dir');
  }

  /**
   * Creates them in a new directory under `parent` (made if missing, mode 0711), named after
   * this process (placeholder-owners.ts: a later server sweeps it once this one is gone).
   */
  static async create(parent: string): Promise<DenyPlaceholders> {
    await mkdir(parent, { recursive: true, mode: 0o711 });
    const p = new DenyPlaceholders(await mkdtemp(posix.join(parent, `deny-${ownerTag()}-`)));
    await p.ensure();
    return p;
  }

  /** Removes them (the server is closing). */
  async remove(): Promise<void> {
    await chmod(this.dir, 0o700).catch(() => undefined);
    await rm(this.root, { recursive: true, force: true });
  }

  /** Makes the placeholders what they must be, if anything changed them. */
  async ensure(): Promise<void> {
    await chmod(this.root, 0o700).catch(() => mkdir(this.root, { recursive: true, mode: 0o700 }));
    const file = await lstat(this.file).catch(() => undefined);
    if (!file?.isFile() || file.size !== 0 || (file.mode & 0o7777) !== 0 || file.nlink !== 1) {
      if (file) await run('rm', ['-rf', '--', this.file]);
      await writeFile(this.file, '', { mode: 0o000 });
      await chmod(this.file, 0o000);
    }
    const dir = await lstat(this.dir).catch(() => undefined);
    if (!dir?.isDirectory() || (dir.mode & 0o7777) !== 0 || dir.nlink !== 2) {
      if (dir) await run('rm', ['-rf', '--', this.dir]);
      await mkdir(this.dir, { mode: 0o000 });
      await chmod(this.dir, 0o000);
    }
  }
}

/** What a session adds to the sandbox: its private /tmp on the host, and the placeholders. */
export interface SandboxLayout {
  readonly privateTmp: string;
  readonly placeholders: DenyPlaceholders;
  /** The session's workspace: visible (read-only at least) even where it lies under /tmp. */
  readonly workdir?: string | undefined;
  /**
   * The host's /dev/pts in the sandbox, so that a PTY-mode command's terminal has its name
   * (`tty`, ttyname: bwrap's /dev has a devpts of its own without it). Only where sandboxed
   * commands run as users of their own (a root server): the other sessions' terminals listed
   * there stay closed to them (mode 0620, root's); under one shared uid they would not.
   */
  readonly hostTerminals?: boolean | undefined;
  /** /etc/passwd and /etc/group that name the sandbox user (sandbox-accounts.ts), bound over the host's. */
  readonly accounts?: SandboxAccounts | undefined;
  /** The client's directories (client-dirs.ts): visible at their own paths even under /tmp. */
  readonly clientDirs?: { readonly all: readonly string[] } | undefined;
}

async function kindOf(path: string): Promise<'dir' | 'file' | 'missing'> {
  try {
    return (await stat(path)).isDirectory() ? 'dir' : 'file';
  } catch {
    return 'missing';
  }
}

/** Whether `dir` lies under /tmp and in no writable root but /tmp itself (the private /tmp hides it). */
export function hiddenByPrivateTmp(dir: string, writableRoots: readonly string[]): boolean {
  return isWithin(dir, '/tmp') && !writableRoots.some((r) => posix.normalize(r) !== '/tmp' && isWithin(dir, r));
}

/**
 * The directories between a writable root and a deny-read path below it. A command could rename
 * one of them (`mv secrets old`) with the placeholder inside, and the next sandbox, which covers
 * the path by its name, would show the file at its new one: each becomes a mount point of its own
 * (bound onto itself, as writable as before), which rename and rmdir refuse (EBUSY). Roots at
 * `/tmp` are left out: the private /tmp is no host path to bind from.
 */
async function writableParents(
  denied: readonly { path: string }[],
  sandbox: Extract<ResolvedSandbox, { kind: 'restricted' }>,
): Promise<string[]> {
  const roots = sandbox.writableRoots.map((r) => posix.normalize(r)).filter((r) => r !== '/tmp');
  const parents = new Set<string>();
  for (const { path } of denied) {
    const root = roots.filter((r) => r !== path && isWithin(path, r)).sort((a, b) => b.length - a.length)[0];
    if (root === undefined) continue;
    for (let dir = posix.dirname(path); dir !== root && isWithin(dir, root); dir = posix.dirname(dir)) {
      // A parent that is itself denied gets its placeholder, not a bind.
      if (!denied.some((d) => isWithin(dir, d.path)) && (await kindOf(dir)) === 'dir') parents.add(dir);
    }
  }
  return [...parents];
}

/** The `bwrap` arguments (without the command) for a restricted sandbox. */
export async function bubblewrapArgs(
  sandbox: Extract<ResolvedSandbox, { kind: 'restricted' }>,
  cwd: string,
  layout: SandboxLayout,
): Promise<string[]> {
  // No --new-session: every command already runs in a session of its own (the relay's, or
  // the terminal's), which also blocks TIOCSTI, and bwrap's would keep group signals from it.
  const args = [...SANDBOX_BASE, '--unshare-ipc', '--cap-drop', 'ALL', '--die-with-parent'];
  if (layout.hostTerminals && existsSync('/dev/pts/ptmx')) args.push('--dev-bind', '/dev/pts', '/dev/pts');
  if (!sandbox.network) args.push('--unshare-net');
  if (layout.accounts)
    args.push('--ro-bind', layout.accounts.passwd, '/etc/passwd', '--ro-bind', layout.accounts.group, '/etc/group');
  // Parents before children: the private /tmp must not cover a writable root below /tmp (a
  // workspace there), and a root must not cover the private /tmp.
  const tmpWritable = sandbox.writableRoots.some((r) => posix.normalize(r) === '/tmp');
  const mounts: { target: string; args: string[] }[] = [
    { target: '/tmp', args: [tmpWritable ? '--bind' : '--ro-bind', layout.privateTmp, '/tmp'] },
  ];
  const visible = sandbox.writableRoots.map((r) => ({ path: r, writable: true }));
  // The workspace, the client's directories and the command's cwd stay visible (read-only at
  // least) where they lie under the host's /tmp, which the private one hides.
  for (const dir of new Set([layout.workdir, ...(layout.clientDirs?.all ?? []), cwd])) {
    if (dir !== undefined && hiddenByPrivateTmp(dir, sandbox.writableRoots))
      visible.push({ path: dir, writable: false });
  }
  for (const { path: root, writable } of visible) {
    if (posix.normalize(root) === '/tmp') continue;
    if ((await kindOf(root)) === 'missing') continue;
    mounts.push({ target: root, args: [writable ? '--bind' : '--ro-bind', root, root] });
    // The mount point in the private /tmp: bwrap would make its parents closed to all but root
    // (and could not make it at all where that /tmp is read-only).
    if (isWithin(root, '/tmp'))
      await mkdir(posix.join(layout.privateTmp, posix.relative('/tmp', root)), { recursive: true, mode: 0o711 });
  }
  const denied: { path: string; kind: 'dir' | 'file' }[] = [];
  for (const spelled of sandbox.denyRead) {
    // As the fs calls compare it: `/ws/x/../.env` is `/ws/.env` even while x is missing, and a
    // file named with a trailing slash is still that file (stat would call both missing).
    const path = posix.normalize(spelled).replace(/(.)\/+$/, '$1');
    const kind = await kindOf(path);
    if (kind !== 'missing') denied.push({ path, kind });
  }
  for (const parent of await writableParents(denied, sandbox))
    mounts.push({ target: parent, args: ['--bind', parent, parent] });
  mounts.sort((a, b) => a.target.split('/').length - b.target.split('/').length);
  for (const m of mounts) args.push(...m.args);
  const { placeholders } = layout;
  if (sandbox.writableRoots.some((r) => isWithin(placeholders.root, r)))
    args.push('--ro-bind', placeholders.root, placeholders.root);
  for (const { path, kind } of denied)
    args.push('--ro-bind', kind === 'dir' ? placeholders.dir : placeholders.file, path);
  args.push('--chdir', cwd);
  return args;
}
