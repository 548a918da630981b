/**
 * A pipe-mode process on the host, run by `build/pty-relay --pipe` (native/pty-relay.c): the
 * relay starts the command in a session and process group of its own on the pipes we give it,
 * reports its pid and exit on a control socket (fd 3), and keeps what the command leaves
 * running in the background until its session ends (keepers.ts); nothing outlives the server.
 * The exit is reported after stdout and stderr have ended, or shortly after the exit when a
 * background grandchild keeps the pipes open.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import type { Socket } from 'node:net';
import type { Duplex, Readable, Writable } from 'node:stream';
import { execError } from '../../errors.ts';
import type { BackendExit, BackendProcess, ProcessSink, SignalName, TerminalSize } from '../types.ts';
import { spawnFailure } from '../spawn-failure.ts';
import { keptRelay, onControlLines, type RelaySpawn, watchRelayEnd } from './keepers.ts';
import { ptyRelayPath, ptyRelayProblem } from './pty-process.ts';
import type { SpawnedRelay } from './relay-spawner.ts';
import { signalGroup, signalName } from './signals.ts';

/** After the exit, how long to wait for pipes held open by leftover grandchildren. */
const PIPE_CLOSE_GRACE_MS = 250;
/** Bytes of stdin we buffer for a child that does not read; past it writes fail clearly. */
const STDIN_BUFFER_LIMIT = 8 * 1024 * 1024;

/**
 * `channels` carry stdout only: stderr stays a plain pipe (volume goes to stdout, and each
 * channel costs the loop a handshake per spawn, see output-channels.ts).
 */
export interface PipeSpawn extends RelaySpawn {
  readonly argv0?: string | undefined;
  readonly stdin: boolean;
}

/** What a pipe process and its relay's handlers share: the command's pid once known, its exit, paused output. */
interface PipeState {
  pid: number | undefined;
  status: BackendExit | undefined;
  paused: boolean;
}

/** The relay's arguments for `opts`. */
function relayArgs(opts: PipeSpawn): string[] {
  const arg0 = opts.argv0 !== undefined ? ['--arg0', opts.argv0] : [];
  return [...(opts.reportExec ? ['--exec-report'] : []), '--pipe', ...arg0, opts.file, ...opts.args];
}

/** The relay (or, without one, the command itself) started with the command's stdio. */
function startRelay(opts: PipeSpawn, viaRelay: boolean, childEnd: Socket | undefined): ChildProcess {
  return spawn(viaRelay ? ptyRelayPath() : opts.file, viaRelay ? relayArgs(opts) : [...opts.args], {
    cwd: opts.cwd,
    env: opts.env,
    argv0: viaRelay ? undefined : opts.argv0,
    detached: true,
    stdio: [opts.stdin ? 'pipe' : 'ignore', childEnd ?? 'pipe', 'pipe', viaRelay ? 'pipe' : 'ignore'],
  });
}

/** The process as the backend hands it out: stdin, signals to its group, output flow. */
function pipeProcess(
  opts: PipeSpawn,
  relay: { readonly stdin: Writable | null },
  stdout: Readable | null,
  stderr: Readable | null,
  st: PipeState,
): BackendProcess & { readonly pid: number | undefined } {
  return {
    /** The command's (its process group's) pid, known once it runs. */
    get pid(): number | undefined {
      return st.pid;
    },
    sandboxType: opts.sandboxType,
    async write(data: Buffer) {
      const stdin = relay.stdin;
      if (!stdin || stdin.destroyed || stdin.writableEnded) return;
      if (stdin.writableLength + data.length > STDIN_BUFFER_LIMIT) {
        throw execError(
          'EXEC_ERR_TOO_LARGE',
          `stdin buffer full (${STDIN_BUFFER_LIMIT} bytes not yet read by the process)`,
        );
      }
      stdin.write(data);
    },
    async stdinRoom(bytes: number) {
      const stdin = relay.stdin;
      const need = Math.min(bytes, STDIN_BUFFER_LIMIT);
      // Past the budget a write has said "full" (the budget is far above the stream's mark), so
      // 'drain' comes once the command has read it all; 'close' if it never will.
      while (stdin && !stdin.destroyed && !stdin.writableEnded && stdin.writableLength + need > STDIN_BUFFER_LIMIT)
        await new Promise<void>((resolve) => {
          const done = (): void => {
            stdin.off('drain', done).off('close', done);
            resolve();
          };
          stdin.on('drain', done).on('close', done);
        });
    },
    async closeStdin() {
      relay.stdin?.end();
    },
    async resize(_size: TerminalSize) {
      // Pipes have no terminal size; the engine rejects resize for them before this point.
    },
    async signal(sig: SignalName) {
      // Once the exit is known, the group may be gone and its id reused.
      if (st.pid !== undefined && !st.status) signalGroup(st.pid, sig);
    },
    pauseOutput() {
      st.paused = true;
      stdout?.pause();
      stderr?.pause();
    },
    resumeOutput() {
      st.paused = false;
      stdout?.resume();
      if (st.pid !== undefined) stderr?.resume();
    },
  } satisfies BackendProcess & { readonly pid: number | undefined };
}

/** Output to the sink: stdout unless a channel carries it; stderr paused until the pid is known. */
function readOutput(sink: ProcessSink, stdout: Readable | null, stderr: Readable | null): void {
  stdout?.on('data', (d: Buffer) => sink.output('stdout', d));
  // stderr and the control socket are read apart: nothing of stderr before the pid is known.
  stderr?.pause();
  stderr?.on('data', (d: Buffer) => sink.output('stderr', d));
}

/** Why the relay (or the command itself) could not be started: the program missing or not executable, or ours. */
function startError(opts: PipeSpawn, err: NodeJS.ErrnoException): Error {
  if (err.code === 'ENOENT' || err.code === 'EACCES') {
    const why = err.code === 'ENOENT' ? 'No such file or directory' : 'Permission denied';
    return spawnFailure(opts.program ?? opts.file, err.code, why);
  }
  // All arguments and the environment together past the system's bound.
  if (err.code === 'E2BIG') return spawnFailure(opts.program ?? opts.file, err.code, 'Argument list too long');
  return execError('EXEC_ERR_INTERNAL', `failed to start ${opts.file}: ${err.message}`, { cause: err });
}

/**
 * The relay started by the session's spawner; undefined when there is none or it is gone (the
 * server then spawns the relay itself). A start that failed is the command's error.
 */
async function spawnedRelay(opts: PipeSpawn): Promise<SpawnedRelay | undefined> {
  if (!opts.spawner?.alive) return undefined;
  try {
    return await opts.spawner.spawn(ptyRelayPath(), relayArgs(opts), opts);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code === undefined) return undefined;
    throw startError({ ...opts, file: ptyRelayPath() }, e);
  }
}

/** A channel for stdout that reads into the shared buffer (output-channels.ts), if there is one. */
function outputChannel(opts: PipeSpawn, sink: ProcessSink) {
  return opts.channels?.open((d) => sink.output('stdout', d)).catch(() => undefined);
}

/** Starts a pipe-mode command through its relay (or as our child without one) and reports to `sink`. */
export async function spawnPipe(
  opts: PipeSpawn,
  sink: ProcessSink,
): Promise<BackendProcess & { readonly pid: number | undefined }> {
  // Without the relay (no C compiler at install) the command is our child directly: it then
  // runs in its own process group, but what it leaves behind is not kept, and can outlive us.
  const viaRelay = ptyRelayProblem() === undefined;
  const spawned = viaRelay ? await spawnedRelay(opts) : undefined;
  const channel = spawned ? undefined : await outputChannel(opts, sink);
  return new Promise((resolve, reject) => {
    const relay = spawned ?? startRelay(opts, viaRelay, channel?.childEnd);
    channel?.childEnd.destroy(); // the relay has its own copy now (or never will)
    const stdout: Readable | null = channel?.reader ?? relay.stdout;
    const stderr = relay.stderr;
    const control = (relay.stdio[3] as Duplex | null) ?? undefined;
    let open = 2;
    let reported = false;
    const st: PipeState = { pid: undefined, status: undefined, paused: false };
    const drop = (): void => {
      stdout?.destroy();
      stderr?.destroy();
    };
    const report = (): void => {
      if (reported || !st.status) return;
      reported = true;
      drop();
      sink.exit(st.status);
    };
    const ended = (): void => {
      if (--open === 0) report();
    };
    const exited = (s: BackendExit): void => {
      if (st.status) return;
      st.status = s;
      if (open === 0) report();
      else setTimeout(report, PIPE_CLOSE_GRACE_MS).unref();
    };
    readOutput(sink, channel ? null : stdout, stderr);
    stdout?.on('end', ended).on('error', ended);
    stderr?.on('end', ended).on('error', ended);
    relay.stdin?.on('error', () => undefined); // EPIPE when the child stops reading: not our failure
    control?.on('error', () => undefined);
    const fail = (why: string): void => {
      if (st.pid === undefined) {
        drop();
        reject(execError('EXEC_ERR_INTERNAL', `the process relay failed: ${why}`));
      } else {
        exited({ kind: 'lost', reason: `the process relay ended without reporting the exit: ${why}` });
      }
    };
    relay.once('error', (err: NodeJS.ErrnoException) => {
      if (relay.pid !== undefined) return fail(err.message);
      drop();
      reject(startError(opts, err));
    });
    watchRelayEnd(relay, control, { exited, lost: fail, done: () => st.status !== undefined });
    if (relay.pid !== undefined && control) opts.keepers?.add(keptRelay(relay));

    const proc = pipeProcess(opts, relay, stdout, stderr, st);
    const started = (n: number): void => {
      st.pid = n;
      if (!st.paused) stderr?.resume();
      resolve(proc);
    };
    if (!control) {
      relay.once('spawn', () => started(relay.pid!));
      return;
    }
    onControlLines(control, (word, n, rest) => {
      if (word === 'pid') {
        started(n);
      } else if (word === 'error') {
        drop();
        reject(spawnFailure(opts.program ?? opts.file, n, rest));
      } else if (word === 'exit' || word === 'signal') {
        exited(word === 'exit' ? { kind: 'exited', code: n } : { kind: 'signaled', signal: signalName(n), signo: n });
      }
    });
  });
}
