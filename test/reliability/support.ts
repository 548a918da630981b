/**
 * Helpers of the standing reliability suite: the real server as a child process (`serve`, the
 * same entry point as `npm start`), host process lookups, and the root/bubblewrap precondition.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TestSession } from '../support/harness.ts';

const MAIN = fileURLToPath(new URL('../../src/main.ts', import.meta.url));

export interface ServerProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly url: string;
  readonly port: number;
  readonly workspaceRoot: string;
  stderr(): string;
  /** Resolves with the exit code (or signal) once the process is gone. */
  readonly exited: Promise<number | string | null>;
}

/**
 * Starts `exec-server serve` on a free loopback port and waits for its `ws://` line. `inherited`:
 * that many pipes handed to the server as fds 3 and up (descriptors a parent leaked to it).
 */
export async function spawnServer(
  args: readonly string[] = [],
  env: NodeJS.ProcessEnv = {},
  inherited = 0,
): Promise<ServerProcess> {
  const workspaceRoot = await mkdtemp(join(tmpdir(), 'exec-server-rel-'));
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      MAIN,
      'serve',
      '--listen',
      'ws://127.0.0.1:0',
      '--workspace-root',
      workspaceRoot,
      '--terminate-grace-ms',
      '500',
      ...args,
    ],
    {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe', ...Array.from({ length: inherited }, () => 'pipe' as const)],
    },
  );
  let out = '';
  let err = '';
  child.stderr!.on('data', (d) => {
    if (err.length < 1_000_000) err += String(d);
  });
  const exited = new Promise<number | string | null>((resolve) =>
    child.once('exit', (code, signal) => resolve(signal ?? code)),
  );
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the server did not start: ${err}`)), 60_000);
    child.stdout!.on('data', (d) => {
      out += String(d);
      const line = /^(ws:\/\/\S+)\n/m.exec(out)?.[1];
      if (line) {
        clearTimeout(timer);
        resolve(line);
      }
    });
    void exited.then((code) => reject(new Error(`the server exited (${String(code)}) before listening: ${err}`)));
  });
  return { child, pid: child.pid!, url, port: Number(new URL(url).port), workspaceRoot, stderr: () => err, exited };
}

/** Host processes whose command line is exactly `args` (pids). */
export function processesWith(args: string): number[] {
  const out = execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' });
  return out
    .split('\n')
    .map((l) => /^\s*(\d+)\s(.*)$/.exec(l))
    .filter((m): m is RegExpExecArray => m !== null && m[2] === args)
    .map((m) => Number(m[1]));
}

/** Host processes running as `uid`. */
export function processesOf(uid: number): number[] {
  const out = execFileSync('ps', ['-eo', 'pid=,uid='], { encoding: 'utf8' });
  return out
    .split('\n')
    .map((l) => l.trim().split(/\s+/).map(Number))
    .filter(([, u]) => u === uid)
    .map(([p]) => p!);
}

/** Polls `check` until it holds or `ms` pass; the last value. */
export async function eventually<T>(check: () => T, ok: (v: T) => boolean, ms = 5_000): Promise<T> {
  const deadline = Date.now() + ms;
  let v = check();
  while (!ok(v) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    v = check();
  }
  return v;
}

function hasBubblewrap(): boolean {
  try {
    execFileSync('bwrap', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/**
 * The local sandbox's isolation needs root (a user per session) and bubblewrap. Elsewhere these
 * tests say so and skip; under CI=true (root, bubblewrap installed by .ci/run) they must run.
 */
export const rootSandboxOnly =
  process.env['CI'] === 'true' || (process.getuid?.() === 0 && hasBubblewrap())
    ? {}
    : { skip: 'needs root and bubblewrap (sandboxed commands run as users of their own only then)' };

/**
 * A workspace-write session on `server` as `token`'s tenant (`session` adds to or overrides the
 * spec), with the workdir its `session/info` reports.
 */
export async function openSandboxed(
  server: ServerProcess,
  token: string | undefined,
  session: Record<string, unknown> = {},
): Promise<{ s: TestSession; workdir: string }> {
  const s = await TestSession.open(
    server.url,
    { session: { sandbox: { type: 'workspace-write' }, ...session } },
    { token },
  );
  const workdir = String((await s.request<Record<string, unknown>>('session/info', {}))['workdir']);
  return { s, workdir };
}
