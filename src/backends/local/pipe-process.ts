/**
 * A pipe-mode process on the host (child_process), in its own session and process group so
 * signals reach the whole group. The exit is reported after stdout and stderr have ended,
 * or shortly after the exit when a background grandchild keeps the pipes open.
 */
import { spawn } from 'node:child_process';
import type { Readable } from 'node:stream';
import { execError } from '../../errors.ts';
import type { BackendProcess, ProcessSink, SandboxType, SignalName, TerminalSize } from '../types.ts';
import type { OutputChannels } from './output-channels.ts';
import { signalGroup, signalNumber } from './signals.ts';

/** After the exit, how long to wait for pipes held open by leftover grandchildren. */
const PIPE_CLOSE_GRACE_MS = 250;
/** Bytes of stdin we buffer for a child that does not read; past it writes fail clearly. */
const STDIN_BUFFER_LIMIT = 8 * 1024 * 1024;

export interface PipeSpawn {
  readonly file: string;
  readonly args: readonly string[];
  readonly argv0?: string | undefined;
  readonly cwd: string;
  readonly env: Readonly<Record<string, string>>;
  readonly stdin: boolean;
  readonly sandboxType: SandboxType;
  /**
   * Where stdout is read (a plain pipe without). stderr stays a plain pipe: volume goes to
   * stdout, and each channel costs the loop a handshake per spawn (see output-channels.ts).
   */
  readonly channels?: OutputChannels | undefined;
}

export async function spawnPipe(opts: PipeSpawn, sink: ProcessSink): Promise<BackendProcess & { readonly pid: number }> {
  const channel = await opts.channels?.open((d) => sink.output('stdout', d)).catch(() => undefined);
  return new Promise((resolve, reject) => {
    const child = spawn(opts.file, [...opts.args], {
      cwd: opts.cwd,
      env: opts.env,
      argv0: opts.argv0,
      detached: true,
      stdio: [opts.stdin ? 'pipe' : 'ignore', channel?.childEnd ?? 'pipe', 'pipe'],
    });
    channel?.childEnd.destroy(); // the child has its own copy now (or never will)
    const stdout: Readable | null = channel?.reader ?? child.stdout;
    const stderr = child.stderr;
    let open = 2;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let reported = false;
    const report = (): void => {
      if (reported || !exit) return;
      reported = true;
      stdout?.destroy();
      stderr?.destroy();
      if (exit.signal) sink.exit({ kind: 'signaled', signal: exit.signal, signo: signalNumber(exit.signal) });
      else sink.exit({ kind: 'exited', code: exit.code ?? -1 });
    };
    const ended = (): void => {
      if (--open === 0) report();
    };
    if (!channel) stdout?.on('data', (d: Buffer) => sink.output('stdout', d));
    stderr?.on('data', (d: Buffer) => sink.output('stderr', d));
    stdout?.on('end', ended).on('error', ended);
    stderr?.on('end', ended).on('error', ended);
    child.stdin?.on('error', () => undefined); // EPIPE when the child stops reading: not our failure
    child.once('error', (err: NodeJS.ErrnoException) => {
      if (child.pid === undefined) {
        stdout?.destroy();
        stderr?.destroy();
        reject(execError('EXEC_ERR_INVALID_REQUEST', `failed to start ${opts.file}: ${err.code === 'ENOENT' ? 'No such file or directory' : err.message}`, { cause: err }));
      }
    });
    child.once('exit', (code, signal) => {
      exit = { code, signal };
      if (open === 0) report();
      else setTimeout(report, PIPE_CLOSE_GRACE_MS).unref();
    });
    child.once('spawn', () => {
      const pid = child.pid as number;
      const proc = {
        pid,
        sandboxType: opts.sandboxType,
        async write(data) {
          const stdin = child.stdin;
          if (!stdin || stdin.destroyed || stdin.writableEnded) return;
          if (stdin.writableLength + data.length > STDIN_BUFFER_LIMIT) {
            throw execError('EXEC_ERR_TOO_LARGE', `stdin buffer full (${STDIN_BUFFER_LIMIT} bytes not yet read by the process)`);
          }
          stdin.write(data);
        },
        async closeStdin() {
          child.stdin?.end();
        },
        async resize(_size: TerminalSize) {
          // Pipes have no terminal size; the engine rejects resize for them before this point.
        },
        async signal(sig: SignalName) {
          signalGroup(pid, sig);
        },
        pauseOutput() {
          stdout?.pause();
          stderr?.pause();
        },
        resumeOutput() {
          stdout?.resume();
          stderr?.resume();
        },
      } satisfies BackendProcess & { readonly pid: number };
      resolve(proc);
    });
  });
}
