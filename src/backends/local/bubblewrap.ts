/**
 * The local backend's sandbox: bubblewrap (`bwrap`, Debian package `bubblewrap`).
 * A read-only view of the whole filesystem, the writable roots bound read-write, deny-read
 * paths covered by an unreadable placeholder, no network unless granted, and every
 * capability dropped so root inside cannot step around file modes.
 */
import { execFile } from 'node:child_process';
import { chmod, mkdir, mkdtemp, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { ResolvedSandbox } from '../types.ts';

const run = promisify(execFile);

export interface BubblewrapProbe {
  readonly available: boolean;
  readonly path: string;
  /** Why it is unavailable (missing binary, or it fails to start a sandbox here). */
  readonly reason?: string | undefined;
}

/** Checks that `bwrap` exists and can really start a sandbox on this host. */
export async function probeBubblewrap(path = 'bwrap'): Promise<BubblewrapProbe> {
  try {
    await run(path, ['--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc', '--unshare-net', '--cap-drop', 'ALL', '--', 'true'], { timeout: 10_000 });
    return { available: true, path };
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string };
    const reason = e.code === 'ENOENT' ? 'bwrap is not installed (Debian package bubblewrap)' : `bwrap cannot start a sandbox here: ${(e.stderr ?? e.message).trim()}`;
    return { available: false, path, reason };
  }
}

/** Unreadable placeholders bound over deny-read paths (mode 000, owned by root). */
export interface DenyPlaceholders {
  readonly file: string;
  readonly dir: string;
}

export async function createDenyPlaceholders(): Promise<DenyPlaceholders> {
  const root = await mkdtemp(join(tmpdir(), 'exec-server-deny-'));
  const file = join(root, 'file');
  const dir = join(root, 'dir');
  await writeFile(file, '');
  await mkdir(dir);
  await chmod(file, 0o000);
  await chmod(dir, 0o000);
  return { file, dir };
}

async function kindOf(path: string): Promise<'dir' | 'file' | 'missing'> {
  try {
    return (await stat(path)).isDirectory() ? 'dir' : 'file';
  } catch {
    return 'missing';
  }
}

/** The `bwrap` arguments (without the command) for a restricted sandbox. */
export async function bubblewrapArgs(sandbox: Extract<ResolvedSandbox, { kind: 'restricted' }>, cwd: string, placeholders: DenyPlaceholders, pty: boolean): Promise<string[]> {
  // No `--proc`: without a pid namespace a fresh procfs shows exactly what the read-only bind
  // of / already shows, and mounting it costs ~0.4 ms per start.
  const args = ['--ro-bind', '/', '/', '--dev', '/dev', '--cap-drop', 'ALL', '--die-with-parent'];
  // A new session would detach a PTY child from its controlling terminal; pipe children
  // already run in their own session (spawned detached), which also blocks TIOCSTI.
  if (!pty) args.push('--new-session');
  if (!sandbox.network) args.push('--unshare-net');
  for (const root of sandbox.writableRoots) {
    if ((await kindOf(root)) !== 'missing') args.push('--bind', root, root);
  }
  for (const denied of sandbox.denyRead) {
    const kind = await kindOf(denied);
    if (kind !== 'missing') args.push('--ro-bind', kind === 'dir' ? placeholders.dir : placeholders.file, denied);
  }
  args.push('--chdir', cwd);
  return args;
}
