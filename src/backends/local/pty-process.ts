/**
 * A PTY-mode process on the host (node-pty).
 *
 * node-pty loses the tail of a fast-exiting program's output on Linux (microsoft/node-pty#726,
 * #72): when the child exits, the last slave descriptor closes, the kernel hangs the terminal
 * up and the master reads EIO while output may still sit in the tty buffer. We hold a slave
 * descriptor open ourselves, so the master never sees the hangup early; once the child is
 * gone and output has been quiet briefly, we close it, the master drains and reads EIO, and
 * node-pty emits its exit after the last data.
 */
import { closeSync, constants, openSync } from 'node:fs';
import pty from 'node-pty';
import type { BackendProcess, ProcessSink, SandboxType, SignalName, TerminalSize } from '../types.ts';
import { signalGroup, signalName } from './signals.ts';

/** Output quiet time after the child is gone before we let the terminal hang up. */
const DRAIN_QUIET_MS = 5;
const POLL_MIN_MS = 2;
const POLL_MAX_MS = 100;
/** Poll ceiling while output is paused, well inside node-pty's 200 ms teardown after the exit. */
const POLL_PAUSED_MS = 20;

export interface PtySpawn {
  readonly file: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env: Readonly<Record<string, string>>;
  readonly size: TerminalSize;
  readonly sandboxType: SandboxType;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export function spawnPty(opts: PtySpawn, sink: ProcessSink): BackendProcess {
  const term = pty.spawn(opts.file, [...opts.args], {
    name: opts.env['TERM'] ?? 'xterm-256color',
    cols: opts.size.cols,
    rows: opts.size.rows,
    cwd: opts.cwd,
    env: { ...opts.env },
    encoding: null,
  });
  const ptsName = (term as unknown as { ptsName: string }).ptsName;
  let slave: number | undefined = openSync(ptsName, constants.O_RDWR | constants.O_NOCTTY);
  let lastData = performance.now();
  let exited = false;
  let paused = false;

  term.onData((data: Buffer | string) => {
    lastData = performance.now();
    sink.output('pty', typeof data === 'string' ? Buffer.from(data) : data);
  });
  term.onExit(({ exitCode, signal }) => {
    exited = true;
    releaseSlave();
    if (signal) {
      sink.exit({ kind: 'signaled', signal: signalName(signal), signo: signal });
    } else {
      sink.exit({ kind: 'exited', code: exitCode });
    }
  });

  function releaseSlave(): void {
    if (slave === undefined) return;
    closeSync(slave);
    slave = undefined;
  }

  // Polls (with backoff while idle) for the child being reaped; node-pty offers no earlier hook.
  let delay = POLL_MIN_MS;
  const poll = (): void => {
    if (exited || slave === undefined) return;
    if (!alive(term.pid)) {
      // node-pty destroys the terminal 200 ms after the child is reaped whether or not its
      // output was read: a paused reader (flow control) must drain the (kernel-bounded) rest now.
      if (paused) {
        paused = false;
        term.resume();
      }
      if (performance.now() - lastData >= DRAIN_QUIET_MS) {
        releaseSlave();
        return;
      }
      setTimeout(poll, DRAIN_QUIET_MS).unref();
      return;
    }
    delay = performance.now() - lastData < 50 ? POLL_MIN_MS : Math.min(delay * 2, paused ? POLL_PAUSED_MS : POLL_MAX_MS);
    setTimeout(poll, delay).unref();
  };
  setTimeout(poll, delay).unref();

  return {
    sandboxType: opts.sandboxType,
    async write(data) {
      if (!exited) term.write(data);
    },
    async closeStdin() {
      // A terminal has no separate stdin to close: send EOF (Ctrl-D) like a user would.
      if (!exited) term.write('\x04');
    },
    async resize(size) {
      if (!exited) term.resize(size.cols, size.rows);
    },
    async signal(sig: SignalName) {
      signalGroup(term.pid, sig);
    },
    pauseOutput() {
      if (exited || paused || !alive(term.pid)) return;
      paused = true;
      term.pause();
    },
    resumeOutput() {
      if (exited || !paused) return;
      paused = false;
      term.resume();
    },
  };
}
