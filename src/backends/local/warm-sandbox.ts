/**
 * Kept-warm bubblewrap sandboxes: a sandboxed start without bwrap's setup on the hot path.
 *
 * Setting up a bubblewrap sandbox (mount, PID and network namespaces, the read-only bind of /,
 * the binds and deny placeholders) costs several milliseconds per command, most of a sandboxed
 * round trip. Instead, a session keeps one idle sandbox per distinct set of bwrap arguments
 * (a bwrap "holder" that lives until its stdin closes), and each command joins the holder's
 * namespaces and root, becomes the session's user, drops every capability, sets no_new_privs,
 * and changes to its directory inside the sandbox before it execs, all in one exec of
 * build/sandbox-join (native/sandbox-join.c, built at install), which is also the holder. The
 * command sees exactly the filesystem, processes and network the same arguments give a fresh bwrap.
 *
 * The holder is pid 2 of the sandbox's PID namespace: what a command leaves running in the
 * background stays in that namespace, and ends when the holder does (the session ends, or
 * `killAll`); bwrap's --die-with-parent ends it with the server, even a SIGKILLed one.
 *
 * Why not util-linux `nsenter` + `setpriv` (tried first): three execs instead of one, `nsenter
 * --wd` opens the directory before entering the namespaces (relative paths then resolve through
 * the host's mounts), and a `cat` holder stays dumpable, so any sandboxed process of any session
 * (same uid, no pid namespace) could open its /proc root and work in its wider sandbox.
 *
 * The arguments are computed per command as before (bubblewrap.ts stats the writable roots
 * and deny-read paths each time), and a holder is only reused for identical arguments: a
 * deny-read path that appears later (a new `.env`) changes the arguments and gets a holder
 * of its own, never an old view. Joining namespaces needs root; without it, or without the
 * helper (no C compiler at install), every command gets its own bwrap as before.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import type { Logger } from '../../logger.ts';
import { sandboxJoinPath } from './native-helpers.ts';
import { SANDBOX_BASE } from './bubblewrap.ts';
import { execError } from '../../errors.ts';

/** Distinct argument sets kept warm per session (a narrowing client can vary them). */
const MAX_HOLDERS = 4;
/** An evicted holder lives this long, for commands handed it just before. */
const EVICTION_GRACE_MS = 5_000;
/** A holder that does not report its sandbox by then is given up (the command falls back). */
const HOLDER_START_TIMEOUT_MS = 10_000;

/** The binaries warm sandboxes need: bwrap for the holder, sandbox-join to enter it. */
export interface WarmSandboxTools {
  readonly bwrap: string;
  /** build/sandbox-join (native/sandbox-join.c): the holder, and the way into it. */
  readonly join: string;
}

const JOIN_HELPER = sandboxJoinPath();

interface Holder {
  readonly child: ChildProcess;
  readonly pid: string;
  /** Namespace ids bwrap reported; sandbox-join refuses a pid whose namespaces differ. */
  readonly mntNs: string;
  readonly netNs: string | undefined;
  readonly pidNs: string;
}

/** Who a sandboxed command runs as: `UID:GID:NPROC` for sandbox-join, or `-` (the caller's ids). */
export function userArg(user: { uid: number; gid: number } | undefined, nproc: number | undefined): string {
  return user ? `${user.uid}:${user.gid}:${nproc ?? '-'}` : '-';
}

/** A command in a fresh bwrap of its own (no holder), as `user` when one is given. */
export function coldArgv(
  tools: { bwrap: string; join: string | undefined },
  bwrapArgs: readonly string[],
  cwd: string,
  argv: readonly string[],
  user: string,
): string[] {
  if (user === '-' || tools.join === undefined) return [tools.bwrap, ...bwrapArgs, '--', ...argv];
  // bwrap keeps just what sandbox-join needs to change user (the change drops them too), and
  // the user enters the directory: a workspace is closed to a root without capabilities.
  const args: string[] = [];
  for (let i = 0; i < bwrapArgs.length; i++) {
    if (bwrapArgs[i] === '--chdir') i++;
    else args.push(bwrapArgs[i]!);
  }
  return [
    tools.bwrap,
    ...args,
    '--cap-add',
    'CAP_SETUID',
    '--cap-add',
    'CAP_SETGID',
    '--',
    tools.join,
    '--as',
    user,
    cwd,
    '--',
    ...argv,
  ];
}

/**
 * The holder identity of a set of bwrap arguments: the arguments without the per-exec options,
 * plus the identity (device, inode, birth time) of both ends of every bind, so that a directory removed and
 * created again under the same name gets a holder of its own instead of the old one's view.
 */
async function sandboxKey(args: readonly string[]): Promise<{ key: string; sandboxArgs: string[]; netns: boolean }> {
  const sandboxArgs: string[] = [];
  const sources: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--chdir') i++;
    else if (a !== '--new-session') sandboxArgs.push(a);
    // Both ends: removing a mount's target detaches the mount in the holder (a deny-read
    // placeholder over a file deleted and written again would no longer cover it).
    if ((a === '--bind' || a === '--ro-bind') && args[i + 2] !== undefined) sources.push(args[i + 1]!, args[i + 2]!);
  }
  // The birth time too: a directory created again right away usually gets the same inode number.
  const ids = await Promise.all(
    sources.map((p) =>
      stat(p, { bigint: true }).then(
        (st) => `${st.dev}:${st.ino}:${st.birthtimeNs}`,
        () => 'missing',
      ),
    ),
  );
  return { key: JSON.stringify([sandboxArgs, ids]), sandboxArgs, netns: sandboxArgs.includes('--unshare-net') };
}

function startHolder(tools: WarmSandboxTools, sandboxArgs: readonly string[]): Promise<Holder> {
  return new Promise((resolve, reject) => {
    // bwrap reports the child pid (--info-fd) before the child has switched to the sandbox's
    // root; the holder's own line on stdout says the sandbox is entirely in place.
    const child = spawn(tools.bwrap, [...sandboxArgs, '--info-fd', '3', '--', tools.join, '--hold'], {
      stdio: ['pipe', 'pipe', 'pipe', 'pipe'],
    });
    let info = '';
    let ready = false;
    let stderr = '';
    const timer = setTimeout(
      () => fail(execError('EXEC_ERR_BACKEND', 'the sandbox did not start in time')),
      HOLDER_START_TIMEOUT_MS,
    );
    const fail = (err: Error): void => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(err);
    };
    const settle = (): void => {
      if (!ready || !infoEnded) return;
      clearTimeout(timer);
      const field = (name: string): string | undefined => new RegExp(`"${name}":\\s*(\\d+)`).exec(info)?.[1];
      const pid = field('child-pid');
      const mntNs = field('mnt-namespace');
      const pidNs = field('pid-namespace');
      if (!pid || !mntNs || !pidNs) {
        fail(
          execError('EXEC_ERR_BACKEND', `bwrap reported no sandbox: ${stderr.trim() || info.trim() || 'no output'}`),
        );
        return;
      }
      child.stdout!.resume();
      child.stderr!.resume();
      resolve({ child, pid, mntNs, netNs: field('net-namespace'), pidNs });
    };
    let infoEnded = false;
    child.once('error', fail);
    child.once('exit', () =>
      fail(execError('EXEC_ERR_BACKEND', `the sandbox ended at start: ${stderr.trim() || 'no output'}`)),
    );
    child.stderr!.setEncoding('utf8').on('data', (s: string) => {
      if (stderr.length < 4096) stderr += s;
    });
    child.stdout!.setEncoding('utf8').once('data', () => {
      ready = true;
      settle();
    });
    const infoStream = child.stdio[3] as Readable;
    infoStream.setEncoding('utf8').on('data', (s: string) => (info += s));
    infoStream.once('end', () => {
      infoEnded = true;
      settle();
    });
  });
}

/** The warm sandboxes of one session. */
export class WarmSandboxes {
  readonly #tools: WarmSandboxTools;
  readonly #log: Logger;
  readonly #holders = new Map<string, Promise<Holder>>();
  #closed = false;

  constructor(tools: WarmSandboxTools, log: Logger) {
    this.#tools = tools;
    this.#log = log;
  }

  /**
   * The argv that runs `argv` in `cwd` inside the sandbox `bwrapArgs` describes, as `user`
   * (userArg), through a warm holder; a fresh bwrap's argv when no holder can be had (the
   * command still runs sandboxed).
   */
  async wrap(bwrapArgs: readonly string[], cwd: string, argv: readonly string[], user = '-'): Promise<string[]> {
    const { key, sandboxArgs, netns } = await sandboxKey(bwrapArgs);
    let holder: Holder;
    try {
      holder = await this.#holder(key, sandboxArgs);
    } catch (err) {
      this.#log.warn({ err }, 'no warm sandbox; starting this command in its own bwrap');
      return coldArgv(this.#tools, bwrapArgs, cwd, argv, user);
    }
    if (netns && !holder.netNs) return coldArgv(this.#tools, bwrapArgs, cwd, argv, user);
    return [
      this.#tools.join,
      holder.pid,
      holder.mntNs,
      netns ? holder.netNs! : '-',
      holder.pidNs,
      user,
      cwd,
      '--',
      ...argv,
    ];
  }

  async #holder(key: string, sandboxArgs: readonly string[]): Promise<Holder> {
    const existing = this.#holders.get(key);
    if (existing) {
      // Most recently used last: eviction takes the first.
      this.#holders.delete(key);
      this.#holders.set(key, existing);
      const holder = await existing;
      if (holder.child.exitCode === null && holder.child.signalCode === null) return holder;
      if (this.#holders.get(key) === existing) this.#holders.delete(key);
    }
    if (this.#closed) throw execError('EXEC_ERR_SESSION_DEAD', 'session closed');
    const starting = startHolder(this.#tools, sandboxArgs);
    this.#holders.set(key, starting);
    starting.catch(() => this.#holders.delete(key));
    this.#evictBeyondLimit();
    const holder = await starting;
    holder.child.once('exit', () => {
      if (this.#holders.get(key) === starting) this.#holders.delete(key);
    });
    return holder;
  }

  #evictBeyondLimit(): void {
    if (this.#holders.size <= MAX_HOLDERS) return;
    const [lruKey, lru] = this.#holders.entries().next().value as [string, Promise<Holder>];
    this.#holders.delete(lruKey);
    // A command given this holder a moment ago may not have joined it yet.
    setTimeout(
      () =>
        void lru.then(
          (h) => h.child.stdin?.end(),
          () => undefined,
        ),
      EVICTION_GRACE_MS,
    ).unref();
  }

  /** The pids of the holders' outer bwrap processes (their sandboxes' processes are below them). */
  async pids(): Promise<number[]> {
    const holders = await Promise.all(
      [...this.#holders.values()].map((h) =>
        h.then(
          (holder) => holder.child.pid,
          () => undefined,
        ),
      ),
    );
    return holders.filter((p): p is number => p !== undefined);
  }

  /**
   * Ends every holder and with it every process in its PID namespace: the commands that joined
   * it, and whatever they left running in the background. Resolves once the holders are gone.
   * Later commands get new holders (unless the session is closed).
   */
  async killAll(): Promise<void> {
    const holders = [...this.#holders.values()];
    this.#holders.clear();
    await Promise.all(
      holders.map((h) =>
        h.then(
          (holder) =>
            new Promise<void>((resolve) => {
              if (holder.child.exitCode !== null || holder.child.signalCode !== null) return resolve();
              holder.child.once('exit', () => resolve());
              // bwrap dies, its --die-with-parent kills the namespace's init, the kernel the rest.
              holder.child.kill('SIGKILL');
            }),
          () => undefined,
        ),
      ),
    );
  }

  /** Ends every holder and what runs in it, for good. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.killAll();
  }
}

/** Finds the tools and checks that a command can join a warm sandbox here; the reason if not. */
export async function probeWarmSandbox(bwrap: string, log: Logger): Promise<WarmSandboxTools | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  if (!existsSync(JOIN_HELPER)) {
    log.info(
      { helper: JOIN_HELPER },
      'warm sandboxes unavailable (helper not built: no C compiler at install?): one bwrap per command',
    );
    return undefined;
  }
  const tools: WarmSandboxTools = { bwrap, join: JOIN_HELPER };
  const sandboxes = new WarmSandboxes(tools, log);
  try {
    const argv = await sandboxes.wrap(
      [...SANDBOX_BASE, '--cap-drop', 'ALL', '--unshare-net', '--die-with-parent'],
      '/',
      ['sh', '-c', 'touch /.exec-server-probe 2>/dev/null && exit 3; exit 0'],
    );
    const [file, ...args] = argv;
    if (file !== tools.join) return undefined;
    const code = await new Promise<number | null>((resolve) => {
      const child: ChildProcess = spawn(file, args, { stdio: 'ignore' });
      child.once('error', () => resolve(null));
      child.once('exit', (c: number | null) => resolve(c));
    });
    if (code !== 0) {
      log.info({ code, via: file }, 'warm sandboxes unavailable (the probe command failed): one bwrap per command');
      return undefined;
    }
    log.debug({ via: file }, 'warm sandboxes available');
    return tools;
  } finally {
    await sandboxes.close();
  }
}
