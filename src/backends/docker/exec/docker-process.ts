/**
 * One user command running as a Docker exec (PTY or pipe), wrapped so its process group can be
 * signalled from a second exec (see scripts.ts). Output goes straight to the sink as it
 * arrives; the exit is taken from `exec.inspect()` only after the stream ended and the demuxer
 * handed over everything, so `sink.exit` always comes after the last `sink.output`.
 */
import { randomUUID } from 'node:crypto';
import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import { CommandInput } from '../../stdin.ts';
import type {
  BackendExit,
  BackendProcess,
  ProcessSink,
  SandboxType,
  SignalName,
  SpawnRequest,
  TerminalSize,
} from '../../types.ts';
import { callbackWritable, FrameDemuxer } from '../engine/frame-demuxer.ts';
import { demuxDone, runControl, socketClosed, startExec, waitExecExit } from './exec-runner.ts';
import type { DockerLogger } from '../options.ts';
import { ROOT_PID_DIR, SIGNAL_SCRIPT, USER_PID_DIR, WAIT_PID_FILE_SCRIPT, WRAPPER_SCRIPT } from './scripts.ts';
import { tagArguments } from './exec-recovery.ts';
import { signalName, signalNumber } from '../../../protocol/signals.ts';

/** Resize attempts while the exec runs, RESIZE_RETRY_MS apart (see `resize`). */
const RESIZE_ATTEMPTS = 10;
const RESIZE_RETRY_MS = 25;

/** What a process needs from its session. */
export interface ProcessHost {
  readonly container: Docker.Container;
  readonly timeoutMs: number;
  readonly log: DockerLogger;
  /** Set once the container is known dead (events or inspection). */
  lostReason(): string | undefined;
  /** Fresh look at the container: running or not (undefined: engine unreachable). */
  containerRunning(): Promise<boolean | undefined>;
  /** The process is over; its pid file can be removed. */
  finished(process: DockerProcess, pidFile: string, user: string): void;
}

/** As whom, and in which sandbox, an exec-path command runs. */
export interface SpawnOptions {
  readonly user: string;
  readonly sandboxType: SandboxType;
}

/** Starts `request` in the session container; resolves once the engine started the exec. */
export async function spawnDockerProcess(
  host: ProcessHost,
  request: SpawnRequest,
  sink: ProcessSink,
  o: SpawnOptions,
): Promise<DockerProcess> {
  const id = randomUUID();
  const isRoot = o.user === '0:0' || o.user === '0' || o.user === 'root';
  const pidFile = `${isRoot ? ROOT_PID_DIR : USER_PID_DIR}/${id}`;
  const tty = request.mode === 'pty';
  const stty = tty ? `rows ${request.size.rows} cols ${request.size.cols}` : '';
  const { exec, socket } = await startExec(
    host.container,
    {
      Cmd: [
        '/bin/sh',
        '-c',
        WRAPPER_SCRIPT,
        'sh',
        pidFile,
        request.cwd,
        stty,
        request.arg0 ?? '',
        isRoot ? '' : (o.user.split(':')[0] ?? ''),
        ...tagArguments(request.recoveryTag),
        ...request.argv,
      ],
      Env: Object.entries(request.env).map(([k, v]) => `${k}=${v}`),
      User: o.user,
      Tty: tty,
      AttachStdin: request.mode !== 'pipe-no-stdin',
      AttachStdout: true,
      AttachStderr: true,
    },
    host.timeoutMs,
  );
  const proc = new DockerProcess(host, exec, socket, request.mode, o.sandboxType, pidFile, o.user, sink);
  if (tty) void proc.resize(request.size);
  return proc;
}

/** A command run as one engine exec: output as it arrives, the exit after the last of it. */
export class DockerProcess implements BackendProcess {
  readonly sandboxType: SandboxType;
  readonly #host: ProcessHost;
  readonly #exec: Docker.Exec;
  readonly #socket: Duplex;
  readonly #mode: SpawnRequest['mode'];
  readonly #pidFile: string;
  readonly #user: string;
  readonly #sink: ProcessSink;
  #exited = false;
  /** The size the terminal should have; the one resize loop applies the newest (see `resize`). */
  #wantedSize: TerminalSize | undefined;
  /** The start's size, which the wrapper sets with stty; true once that stty has surely run. */
  #startSize: TerminalSize | undefined;
  #wrapperSized = false;
  #resizing: Promise<void> | undefined;
  readonly #input: CommandInput;
  #lost: string | undefined;
  #wakeLost: (() => void) | undefined;
  readonly #signalsSent = new Set<number>();

  constructor(
    host: ProcessHost,
    exec: Docker.Exec,
    socket: Duplex,
    mode: SpawnRequest['mode'],
    sandboxType: SandboxType,
    pidFile: string,
    user: string,
    sink: ProcessSink,
  ) {
    this.#host = host;
    this.#exec = exec;
    this.#socket = socket;
    this.#mode = mode;
    this.sandboxType = sandboxType;
    this.#pidFile = pidFile;
    this.#user = user;
    this.#sink = sink;
    this.#input = new CommandInput(mode);
    void this.#run();
  }

  get exited(): boolean {
    return this.#exited;
  }

  /** Streams output until the connection ends, then settles the exit exactly once. */
  async #run(): Promise<void> {
    const socket = this.#socket;
    socket.on('error', (err) => this.#host.log.debug({ err: err.message }, 'exec stream error'));
    let demux: FrameDemuxer | undefined;
    if (this.#mode === 'pty') {
      socket.on('data', (d: Buffer) => {
        if (!this.#exited) this.#sink.output('pty', d);
      });
    } else {
      demux = new FrameDemuxer(
        callbackWritable((d) => {
          if (!this.#exited) this.#sink.output('stdout', d);
        }),
        callbackWritable((d) => {
          if (!this.#exited) this.#sink.output('stderr', d);
        }),
      );
      demux.on('error', (err) => this.#host.log.warn({ err: err.message }, 'exec stream framing error'));
      socket.pipe(demux);
      socket.once('close', () => {
        if (!demux!.writableEnded) demux!.end();
      });
    }
    await socketClosed(socket);
    if (demux !== undefined) await demuxDone(demux);
    this.#settle(await this.#exitOf());
  }

  async #exitOf(): Promise<BackendExit> {
    if (this.#lost !== undefined) return { kind: 'lost', reason: this.#lost };
    const lost = new Promise<'lost'>((resolve) => {
      this.#wakeLost = () => resolve('lost');
    });
    const outcome = await Promise.race([waitExecExit(this.#exec, this.#host.timeoutMs), lost]);
    if (outcome === 'lost' || this.#lost !== undefined) return { kind: 'lost', reason: this.#lost ?? 'session lost' };
    if (outcome.kind === 'gone') return { kind: 'lost', reason: outcome.reason };
    const code = outcome.code;
    const hostLost = this.#host.lostReason();
    if (hostLost !== undefined) return { kind: 'lost', reason: hostLost };
    if (code > 128 && code < 160) {
      const signo = code - 128;
      if (this.#signalsSent.has(signo)) {
        const name = signalName(signo);
        return { kind: 'signaled', signal: name, signo };
      }
      // Killed by a signal we did not send: maybe the whole container is being killed. The
      // engine may record the container's death a moment after the exec's, so look twice.
      for (const wait of [0, 150]) {
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const running = await this.#host.containerRunning();
        if (running === false || running === undefined)
          return { kind: 'lost', reason: this.#host.lostReason() ?? 'container is not running' };
      }
    }
    return { kind: 'exited', code };
  }

  #settle(exit: BackendExit): void {
    if (this.#exited) return;
    this.#exited = true;
    this.#input.shut();
    this.#host.finished(this, this.#pidFile, this.#user);
    this.#sink.exit(exit);
  }

  /** The container died under us: end the stream and report `lost` (after what was received). */
  lose(reason: string): void {
    if (this.#exited || this.#lost !== undefined) return;
    this.#lost = reason;
    this.#wakeLost?.();
    this.#socket.destroy();
  }

  async write(data: Buffer): Promise<void> {
    if (!this.#input.open || this.#exited || data.length === 0) return;
    await new Promise<void>((resolve) => {
      this.#socket.write(data, () => resolve());
    });
  }

  async closeStdin(): Promise<void> {
    // A PTY's connection is never half-closed: some engines then drop the rest of the output.
    await this.#input.end(
      (d) => this.write(d),
      () => {
        // Half-close: FIN on our side only; the engine closes the command's stdin and the socket
        // keeps delivering the remaining output until the command ends.
        this.#socket.end();
      },
    );
  }

  async resize(size: TerminalSize): Promise<void> {
    this.#wantedSize = size;
    this.#startSize ??= size;
    // One loop at a time, always sending the newest size: the spawn's own resize may still be
    // retrying when a client resizes, and must not land after it with the older size.
    this.#resizing ??= this.#applyResize().finally(() => (this.#resizing = undefined));
    return this.#resizing;
  }

  async #applyResize(): Promise<void> {
    // The engine refuses a resize both for an exec that just finished (moby/moby#35561) and,
    // briefly, for one that has just started (its process not yet registered, though output
    // already flows): retry while ours still runs, bounded, then give up quietly.
    for (let attempt = 1; this.#mode === 'pty' && !this.#exited; attempt++) {
      const size = this.#wantedSize;
      if (!size) return;
      try {
        await this.#exec.resize({ h: size.rows, w: size.cols });
        const start = this.#startSize;
        if (!this.#wrapperSized && start !== undefined && (size.cols !== start.cols || size.rows !== start.rows)) {
          // The wrapper's stty (the start's size) may still run after this resize (gVisor
          // starts execs slowly): once its pid file shows it ran, the newest size again.
          await runControl(this.#host.container, {
            cmd: ['/bin/sh', '-c', WAIT_PID_FILE_SCRIPT, 'sh', this.#pidFile],
            timeoutMs: this.#host.timeoutMs,
          }).catch(() => undefined);
          this.#wrapperSized = true;
          attempt = 0;
          continue;
        }
        if (size === this.#wantedSize) return;
        attempt = 0; // a newer size came meanwhile: it gets its own attempts
      } catch (err) {
        if (attempt >= RESIZE_ATTEMPTS) {
          this.#host.log.debug({ err: (err as Error).message }, 'exec resize ignored');
          return;
        }
        await new Promise((r) => setTimeout(r, RESIZE_RETRY_MS));
      }
    }
  }

  pauseOutput(): void {
    // Stops reading the engine connection; the engine then stops reading the exec's output.
    if (!this.#exited) this.#socket.pause();
  }

  resumeOutput(): void {
    if (!this.#exited) this.#socket.resume();
  }

  async signal(signal: SignalName): Promise<void> {
    if (this.#exited) return;
    const signo = signalNumber(signal);
    if (signo !== undefined) this.#signalsSent.add(signo);
    await runControl(this.#host.container, {
      cmd: ['/bin/sh', '-c', SIGNAL_SCRIPT, 'sh', this.#pidFile, signal.replace(/^SIG/, '')],
      user: this.#user,
      timeoutMs: this.#host.timeoutMs,
    });
  }
}
