/**
 * A PTY-mode process on the host (node-pty).
 *
 * node-pty loses the tail of a fast-exiting program's output on Linux (microsoft/node-pty#726,
 * #72) in two ways, both fixed here:
 * - when the child exits, the last slave descriptor closes and the terminal hangs up while
 *   output may still be in flight. We hold a slave descriptor open ourselves, so the master
 *   never sees the hangup early; once the child is gone and output has been quiet briefly, we
 *   close it, the master drains and reads EIO, and node-pty emits its exit after the last data;
 * - node-pty destroys its reader 200 ms after the exit whether or not everything was read. A
 *   loop stalled that long (a loaded machine runs timers before it polls for input) or a reader
 *   paused by flow control loses what is unread. We take that destroy over: it waits for our
 *   drain, and happens anyway once output has been quiet after the release (a background
 *   process still holding the terminal) or after a hard bound.
 */
import { closeSync, constants, openSync } from 'node:fs';
import pty from 'node-pty';
import type { BackendProcess, ProcessSink, SandboxType, SignalName, TerminalSize } from '../types.ts';
import { attachReader } from './pty-reader.ts';
import { signalGroup, signalName } from './signals.ts';

/** Output quiet time after the child is gone before we let the terminal hang up. */
const DRAIN_QUIET_MS = 5;
const POLL_MIN_MS = 2;
const POLL_MAX_MS = 100;
/** Poll ceiling while output is paused, so a finished child is drained promptly. */
const POLL_PAUSED_MS = 20;
/** After the release: quiet time before the reader is destroyed although no EIO came. */
const CLOSE_QUIET_MS = 200;
/** After the release: the reader is destroyed by then whatever still prints to the terminal. */
const CLOSE_MAX_MS = 5_000;

export interface PtySpawn {
  readonly file: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env: Readonly<Record<string, string>>;
  readonly size: TerminalSize;
  readonly sandboxType: SandboxType;
}

/** Runs `fn` `ms` from now, in the check phase: after the loop has polled the terminal once more. */
function afterPoll(fn: () => void, ms: number): void {
  setTimeout(() => setImmediate(fn), ms).unref();
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
  const reader = attachReader(term);

  /** Chunks read so far: the drain below compares it across loop turns. */
  let reads = 0;

  term.onData((data: Buffer | string) => {
    lastData = performance.now();
    reads++;
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
    const releasedAt = performance.now();
    // EIO normally closes the reader once the master is drained; a background process that
    // keeps the terminal open prevents that, so end it ourselves, as node-pty would have.
    let readsBefore = reads;
    const closeIfQuiet = (): void => {
      if (exited || reader.closed()) return;
      const now = performance.now();
      const quiet = reads === readsBefore && now - lastData >= CLOSE_QUIET_MS;
      readsBefore = reads;
      if (quiet || now - releasedAt >= CLOSE_MAX_MS) reader.destroy();
      else afterPoll(closeIfQuiet, CLOSE_QUIET_MS);
    };
    afterPoll(closeIfQuiet, CLOSE_QUIET_MS);
  }

  // Polls (with backoff while idle) for the child being reaped; node-pty offers no earlier hook.
  let delay = POLL_MIN_MS;
  const poll = (): void => {
    if (exited || slave === undefined) return;
    if (!alive(term.pid)) {
      // The child is gone: what is left in the terminal is bounded, so read it whatever the
      // flow control says.
      if (paused) {
        paused = false;
        term.resume();
      }
      drain();
      return;
    }
    delay = performance.now() - lastData < 50 ? POLL_MIN_MS : Math.min(delay * 2, paused ? POLL_PAUSED_MS : POLL_MAX_MS);
    setTimeout(poll, delay).unref();
  };
  setTimeout(poll, delay).unref();

  // The terminal counts as drained when output has been quiet for DRAIN_QUIET_MS *and* two
  // checks in a row saw no new chunk, each made after a poll of the terminal (afterPoll): a
  // loop stalled past the quiet time would otherwise release the slave with output unread.
  let readsAtCheck = -1;
  const drain = (): void => {
    if (exited || slave === undefined) return;
    const quiet = reads === readsAtCheck && performance.now() - lastData >= DRAIN_QUIET_MS;
    readsAtCheck = reads;
    if (quiet) releaseSlave();
    else afterPoll(drain, DRAIN_QUIET_MS);
  };

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
