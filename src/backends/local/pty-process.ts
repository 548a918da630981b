/**
 * A PTY-mode process on the host, through `build/pty-relay` (native/pty-relay.c, built at
 * install). The relay opens the terminal, starts the command on it, and relays the terminal over
 * sockets: output on its stdout, keystrokes on its stdin, resizes and the command's pid and exit
 * on a control socket (fd 3).
 *
 * Why not node-pty: the kernel hands out a terminal 4 KiB per read, so a Node reader takes one
 * callback per 4 KiB and the command waits on a full terminal while the loop encodes and sends;
 * the relay reads the terminal in C as it fills and we read its socket up to 64 KiB at a time
 * (PTY streams went from 55-70 to 80-105 MB/s here, docs/benchmarks.md). The relay also decides when the
 * output has ended (the master reads EIO once every holder of the terminal is gone, with a bound
 * for background processes that keep it open), which node-pty got wrong on fast exits.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { Socket } from 'node:net';
import type { Duplex, Writable } from 'node:stream';
import { execError } from '../../errors.ts';
import type { BackendExit, BackendProcess, ProcessSink, SignalName, TerminalSize } from '../types.ts';
import { PTY_EOF } from '../stdin.ts';
import { nativeHelperPath } from './native-helpers.ts';
import { spawnFailure } from '../spawn-failure.ts';
import { keptRelay, onControlLines, type RelaySpawn, watchRelayEnd } from './keepers.ts';
import type { SpawnedRelay } from './relay-spawner.ts';
import { signalGroup, signalName } from './signals.ts';

const PTY_RELAY = nativeHelperPath('pty-relay');
/** Bytes of keystrokes we buffer for a terminal nobody reads; past it writes fail clearly. */
const STDIN_BUFFER_LIMIT = 8 * 1024 * 1024;
/** Diagnostics the relay may print on its stderr, kept for the error message. */
const RELAY_STDERR_LIMIT = 4096;

/** A PTY-mode start: the relay's start plus the terminal size and whether the relay may pin CPUs. */
export interface PtySpawn extends RelaySpawn {
  readonly size: TerminalSize;
  /** Whether the relay may pin the command to one CPU while it streams fast (default true). */
  readonly pinning?: boolean | undefined;
}

/** The relay both modes run under (`--pipe` for pipe mode). */
export function ptyRelayPath(): string {
  return PTY_RELAY;
}

/** Whether the relay is there (PTY mode needs it, pipe mode keeps its commands with it); the reason when not. */
export function ptyRelayProblem(): string | undefined {
  return existsSync(PTY_RELAY)
    ? undefined
    : `the PTY helper ${PTY_RELAY} is missing (it is built by \`npm install\`; needs a C compiler): run \`sh scripts/build-native.sh\``;
}

/** What the PTY process and the relay's handlers share. */
interface PtyState {
  pid: number | undefined;
  status: BackendExit | undefined;
  reported: boolean;
  paused: boolean;
}

/** The relay's arguments: the command on a new terminal of the asked size. */
function ptyRelayArgs(opts: PtySpawn): string[] {
  return [
    ...(opts.reportExec ? ['--exec-report'] : []),
    ...(opts.pinning === false ? ['--no-pin'] : []),
    String(opts.size.cols),
    String(opts.size.rows),
    opts.file,
    ...opts.args,
  ];
}

function ptyRelayEnv(opts: PtySpawn): Record<string, string> {
  return { TERM: 'xterm-256color', ...opts.env };
}

/** The relay as the server's own child. */
function startPtyRelay(opts: PtySpawn, childEnd: Socket | undefined): ChildProcess {
  return spawn(PTY_RELAY, ptyRelayArgs(opts), {
    cwd: opts.cwd,
    env: ptyRelayEnv(opts),
    // A session of its own: a Ctrl-C or SIGTERM meant for the server's terminal or group must
    // not end the relay before it has ended what it keeps.
    detached: true,
    stdio: ['pipe', childEnd ?? 'pipe', 'pipe', 'pipe'],
  });
}

/**
 * The relay started by the session's spawner, in a session of its own too; undefined when there
 * is none or it is gone (the server then spawns the relay itself).
 */
async function spawnedPtyRelay(opts: PtySpawn): Promise<SpawnedRelay | undefined> {
  if (!opts.spawner?.alive) return undefined;
  try {
    return await opts.spawner.spawn(PTY_RELAY, ptyRelayArgs(opts), { ...opts, env: ptyRelayEnv(opts), stdin: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === undefined) return undefined;
    throw execError('EXEC_ERR_INTERNAL', `PTY helper failed: ${(err as Error).message}`, { cause: err });
  }
}

/** The process as the backend hands it out: keys to the terminal, its size, signals, output flow. */
function ptyProcess(
  opts: PtySpawn,
  keys: Writable,
  control: Duplex,
  output: Duplex,
  st: PtyState,
): BackendProcess & { readonly pid: number | undefined } {
  const proc = {
    /** The command's (its process group's) pid, known once the relay reported it. */
    get pid(): number | undefined {
      return st.pid;
    },
    sandboxType: opts.sandboxType,
    async write(data) {
      if (st.status || keys.destroyed) return;
      if (keys.writableLength + data.length > STDIN_BUFFER_LIMIT) {
        throw execError(
          'EXEC_ERR_TOO_LARGE',
          `terminal input buffer full (${STDIN_BUFFER_LIMIT} bytes not yet read by the process)`,
        );
      }
      keys.write(data);
    },
    async closeStdin() {
      await proc.write(PTY_EOF);
    },
    async resize(size) {
      if (!st.status && !control.destroyed) control.write(`resize ${size.cols} ${size.rows}\n`);
    },
    async signal(sig: SignalName) {
      // Once reported, the group may be gone and its id reused.
      if (st.pid !== undefined && !st.reported) signalGroup(st.pid, sig);
    },
    pauseOutput() {
      if (st.status || st.paused) return;
      st.paused = true;
      output.pause();
    },
    resumeOutput() {
      if (!st.paused) return;
      st.paused = false;
      output.resume();
    },
  } satisfies BackendProcess & { readonly pid: number | undefined };
  return proc;
}

/** Starts a PTY-mode command through the PTY relay and reports to `sink`. */
export async function spawnPty(
  opts: PtySpawn,
  sink: ProcessSink,
): Promise<BackendProcess & { readonly pid: number | undefined }> {
  const problem = ptyRelayProblem();
  if (problem) throw execError('EXEC_ERR_UNSUPPORTED', `PTY mode is unavailable: ${problem}`);
  const spawned = await spawnedPtyRelay(opts);
  const channel = spawned ? undefined : await opts.channels?.open((d) => sink.output('pty', d)).catch(() => undefined);
  return new Promise((resolve, reject) => {
    const relay = spawned ?? startPtyRelay(opts, channel?.childEnd);
    channel?.childEnd.destroy(); // the relay has its own copy now (or never will)
    const keys = relay.stdin as Writable;
    const output = (channel?.reader ?? relay.stdout) as Duplex;
    const control = relay.stdio[3] as Duplex;
    let stderr = '';
    let outputEnded = false;
    const st: PtyState = { pid: undefined, status: undefined, reported: false, paused: false };

    const report = (): void => {
      if (st.reported || !st.status || !outputEnded) return;
      st.reported = true;
      // The control socket stays open: the relay keeps what the command left running in the
      // background until the session ends it (keepers.ts), and leaves at once if there is none.
      sink.exit(st.status);
    };
    const fail = (why: string): void => {
      if (st.pid === undefined) {
        reject(execError('EXEC_ERR_INTERNAL', `PTY helper failed: ${why}${stderr ? ` (${stderr.trim()})` : ''}`));
      } else if (!st.status) {
        st.status = { kind: 'lost', reason: `PTY helper ended without reporting the exit: ${why}` };
        outputEnded = true;
        report();
      }
    };

    relay.stderr?.setEncoding('utf8').on('data', (s: string) => {
      if (stderr.length < RELAY_STDERR_LIMIT) stderr += s.slice(0, RELAY_STDERR_LIMIT - stderr.length);
    });
    if (!channel) output.on('data', (d: Buffer) => sink.output('pty', d));
    output.once('end', () => {
      outputEnded = true;
      report();
    });
    output.on('error', () => undefined); // the relay's exit is what counts
    keys.on('error', () => undefined); // EPIPE after the relay is gone: not the caller's failure
    control.on('error', () => undefined);
    relay.once('error', (err: NodeJS.ErrnoException) =>
      // All arguments and the environment together past the system's bound: the command's error.
      err.code === 'E2BIG' && st.pid === undefined
        ? reject(spawnFailure(opts.program ?? opts.file, err.code, 'Argument list too long'))
        : fail(err.message),
    );
    // Whatever the relay reported reaches us before its control socket closes, whereas its exit
    // may be seen first: a relay counts as gone without a report only once both have happened.
    watchRelayEnd(relay, control, { exited: () => undefined, lost: fail, done: () => false });

    if (relay.pid !== undefined) opts.keepers?.add(keptRelay(relay));
    onControlLines(control, (word, n, rest) => {
      if (word === 'pid') {
        st.pid = n;
        resolve(proc);
      } else if (word === 'error') {
        reject(spawnFailure(opts.program ?? opts.file, n, rest));
      } else if (word === 'exit' || word === 'signal') {
        st.status =
          word === 'exit' ? { kind: 'exited', code: n } : { kind: 'signaled', signal: signalName(n), signo: n };
        // What is left in the terminal is bounded: read it whatever the flow control says.
        if (st.paused) output.resume();
        report();
      }
    });

    const proc = ptyProcess(opts, keys, control, output, st);
  });
}
