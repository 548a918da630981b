/**
 * Low-level exec plumbing shared by user processes, control commands (signals, sandbox
 * preparation) and the filesystem: create + hijacked start with deadlines, exit-code polling,
 * and a bounded "run a small script and collect its output" helper.
 */
import type { Duplex } from 'node:stream';
import { PassThrough, Readable, Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import { engineError, statusOf, withDeadline } from '../engine/engine-client.ts';
import { callbackWritable, FrameDemuxer } from '../engine/frame-demuxer.ts';

/** An exec created and started with its stream hijacked. */
export interface StartedExec {
  readonly exec: Docker.Exec;
  /** The hijacked connection: raw PTY bytes (Tty) or 8-byte frames; writable side is stdin. */
  readonly socket: Duplex;
}

/**
 * Creates and starts an exec over a hijacked connection. Both steps are bounded by
 * `timeoutMs`; a start that answers after the deadline has its socket destroyed. (No
 * AbortSignal on start: aborting the request after the upgrade would tear the stream down.)
 */
/** Open exec connections per container, so removing a container can end them all. */
const openStreams = new Map<string, Set<Duplex>>();
/** Containers removed recently: an exec attached just before the removal is ended on arrival. */
const removed = new Set<string>();
const REMOVED_MEMORY = 1024;

function trackStream(containerId: string, socket: Duplex): void {
  if (removed.has(containerId)) {
    socket.destroy();
    return;
  }
  let set = openStreams.get(containerId);
  if (!set) {
    set = new Set();
    openStreams.set(containerId, set);
  }
  set.add(socket);
  socket.once('close', () => {
    set.delete(socket);
    if (set.size === 0 && openStreams.get(containerId) === set) openStreams.delete(containerId);
  });
}

/**
 * Ends every exec connection still open to a container that was removed: the engine does not
 * always close a hijacked connection whose exec was attached while the container went away,
 * and such a connection would hang its caller and keep the server process alive.
 */
export function closeExecStreams(containerId: string): void {
  removed.add(containerId);
  if (removed.size > REMOVED_MEMORY) {
    const oldest = removed.values().next().value;
    if (oldest !== undefined) removed.delete(oldest);
  }
  for (const socket of openStreams.get(containerId) ?? []) socket.destroy();
  openStreams.delete(containerId);
}

/** Creates and starts an exec within a deadline and hands back its hijacked stream. */
export async function startExec(
  container: Docker.Container,
  options: Docker.ExecCreateOptions,
  timeoutMs: number,
): Promise<StartedExec> {
  const exec = await withDeadline('exec create', timeoutMs, (abortSignal) =>
    container.exec({ ...options, abortSignal }),
  );
  let timedOut = false;
  let timer: NodeJS.Timeout | undefined;
  const started = exec.start({
    hijack: true,
    stdin: options.AttachStdin === true,
    Tty: options.Tty === true,
  }) as unknown as Promise<Duplex>;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true;
      reject(execError('EXEC_ERR_BACKEND_UNAVAILABLE', `docker engine did not start the exec within ${timeoutMs} ms`));
    }, timeoutMs);
  });
  started.then(
    (s) => {
      if (timedOut) s.destroy();
    },
    () => {},
  );
  try {
    const socket = await Promise.race([started, deadline]);
    trackStream(container.id, socket);
    return { exec, socket };
  } catch (err) {
    throw engineError(err, 'exec start');
  } finally {
    clearTimeout(timer);
  }
}

/** Result of polling an exec until it stops running. */
export type ExecOutcome =
  | { readonly kind: 'exited'; readonly code: number }
  | { readonly kind: 'gone'; readonly reason: string };

/**
 * Polls `exec.inspect()` until `Running` is false. The stream ends before the engine records
 * the exit code, so the first polls come quickly (2, 4, 8... ms), then settle at 500 ms: a
 * command may close its stdio and keep running, and it is polled for as long as it runs.
 * 404 (exec or container removed) and a lasting engine outage (`maxFailures` consecutive
 * failed polls) give `gone`: the caller reports the process as lost, never a made-up code.
 */
export async function waitExecExit(exec: Docker.Exec, timeoutMs: number, maxFailures = 4): Promise<ExecOutcome> {
  let delay = 2;
  let failures = 0;
  for (;;) {
    try {
      const info = await withDeadline('exec inspect', timeoutMs, (abortSignal) => exec.inspect({ abortSignal }));
      failures = 0;
      if (!info.Running) {
        if (info.ExitCode === null || info.ExitCode === undefined)
          return { kind: 'gone', reason: 'engine reported no exit code' };
        return { kind: 'exited', code: info.ExitCode };
      }
    } catch (err) {
      if (statusOf(err) === 404) return { kind: 'gone', reason: 'exec no longer exists (container removed)' };
      failures += 1;
      if (failures >= maxFailures) return { kind: 'gone', reason: `cannot inspect exec: ${(err as Error).message}` };
    }
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 500);
  }
}

/** Waits until a socket is fully closed (both directions), however it ended. */
export function socketClosed(socket: Duplex): Promise<void> {
  return new Promise((resolve) => {
    if (socket.destroyed) {
      resolve();
      return;
    }
    socket.once('close', () => resolve());
  });
}

/** Resolves when the demuxer has handed over everything (errors included: the exit decides). */
export function demuxDone(demux: FrameDemuxer): Promise<void> {
  return finished(demux).catch(() => undefined);
}

/** A control command's exit code and output. */
export interface ControlResult {
  readonly exitCode: number;
  readonly stdout: Buffer;
  readonly stderr: string;
}

/** A control command of the server's: what to run, as whom, with what bounds. */
export interface ControlOptions {
  readonly cmd: string[];
  readonly user?: string | undefined;
  /** The exec gets every capability (a fixed command of the server's, never a user's). */
  readonly privileged?: boolean | undefined;
  /** Bytes fed to stdin (then EOF); none: stdin is /dev/null. */
  readonly stdin?: Buffer | NodeJS.ReadableStream | undefined;
  /** stdout beyond this is an error (bounded memory). Default 1 MiB. */
  readonly maxStdout?: number | undefined;
  readonly timeoutMs: number;
}

/** The engine exec of a control command: as `user` (root by default), stdout and stderr apart. */
function controlExec(o: {
  cmd: string[];
  user?: string | undefined;
  privileged?: boolean | undefined;
  stdin?: unknown;
}): Docker.ExecCreateOptions {
  return {
    Cmd: o.cmd,
    User: o.user ?? '0:0',
    ...(o.privileged === true ? { Privileged: true } : {}),
    AttachStdin: o.stdin !== undefined,
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
  };
}

/**
 * Runs a short control command to completion and returns its (bounded) output. Used for
 * signals, sandbox preparation and filesystem metadata; never for user commands.
 */
export async function runControl(container: Docker.Container, o: ControlOptions): Promise<ControlResult> {
  const max = o.maxStdout ?? 1024 * 1024;
  const { exec, socket } = await startExec(container, controlExec(o), o.timeoutMs);
  const out: Buffer[] = [];
  let outLen = 0;
  let overflow = false;
  const err: Buffer[] = [];
  let errLen = 0;
  const demux = new FrameDemuxer(
    callbackWritable((d) => {
      outLen += d.length;
      if (outLen > max) {
        overflow = true;
        socket.destroy();
        return;
      }
      out.push(d);
    }),
    callbackWritable((d) => {
      if (errLen < 64 * 1024) err.push(d);
      errLen += d.length;
    }),
  );
  socket.on('error', () => {});
  demux.on('error', () => {});
  socket.pipe(demux);
  socket.once('close', () => {
    if (!demux.writableEnded) demux.end();
  });
  if (o.stdin !== undefined) {
    const src = Buffer.isBuffer(o.stdin) ? Readable.from([o.stdin]) : o.stdin;
    // Half-close after the last byte: `end()` sends FIN, the engine closes the command's stdin,
    // and the socket keeps reading the rest of the output.
    src.pipe(socket);
  }
  await socketClosed(socket);
  await demuxDone(demux);
  if (overflow) throw execError('EXEC_ERR_TOO_LARGE', `control command output exceeds ${max} bytes`);
  const outcome = await waitExecExit(exec, o.timeoutMs);
  if (outcome.kind === 'gone') throw execError('EXEC_ERR_BACKEND', `control command lost: ${outcome.reason}`);
  return { exitCode: outcome.code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') };
}

/**
 * Starts a command whose stdout is streamed to the caller with backpressure (the demuxer
 * pauses the engine socket while `stdout` is full). `stdout` ends only once the exit code is
 * known and `failure` found nothing wrong; otherwise it is destroyed with `failure`'s error, so
 * a reader never mistakes a failed read for a short file.
 */
export async function streamControl(
  container: Docker.Container,
  o: {
    cmd: string[];
    user?: string;
    timeoutMs: number;
    stdin?: NodeJS.ReadableStream;
    failure: (result: ControlResult) => Error | undefined;
  },
): Promise<{ stdout: Readable; done: Promise<ControlResult> }> {
  const { exec, socket } = await startExec(container, controlExec(o), o.timeoutMs);
  const stdout = new PassThrough({ highWaterMark: 256 * 1024 });
  const err: Buffer[] = [];
  // Forwards into `stdout` with backpressure but does not end it (the exit decides that).
  const gate = new Writable({
    highWaterMark: 64 * 1024,
    write(chunk: Buffer, _enc, cb) {
      if (stdout.destroyed || stdout.write(chunk)) {
        cb();
        return;
      }
      // Wait for room, or for the reader to go away (then the rest is dropped).
      const go = (): void => {
        stdout.off('drain', go);
        stdout.off('close', go);
        cb();
      };
      stdout.on('drain', go);
      stdout.on('close', go);
    },
  });
  const demux = new FrameDemuxer(
    gate,
    callbackWritable((d) => err.push(d)),
  );
  socket.on('error', () => {});
  demux.on('error', () => {});
  socket.pipe(demux);
  socket.once('close', () => {
    if (!demux.writableEnded) demux.end();
  });
  // Consumer gave up (destroyed the stream): stop the transfer.
  stdout.once('close', () => {
    if (!stdout.readableEnded) socket.destroy();
  });
  if (o.stdin !== undefined) o.stdin.pipe(socket);
  const done = (async (): Promise<ControlResult> => {
    await socketClosed(socket);
    await demuxDone(demux);
    const outcome = await waitExecExit(exec, o.timeoutMs);
    if (outcome.kind === 'gone') throw execError('EXEC_ERR_BACKEND', `command lost: ${outcome.reason}`);
    return { exitCode: outcome.code, stdout: Buffer.alloc(0), stderr: Buffer.concat(err).toString('utf8') };
  })();
  endWithResult(stdout, done, o.failure);
  return { stdout, done };
}

/**
 * Ends a streamed command's `stdout` by its result: ended when `failure` finds nothing wrong,
 * destroyed with its error (or the command's) otherwise (streamControl's rule, both exec paths).
 */
export function endWithResult(
  stdout: PassThrough,
  done: Promise<ControlResult>,
  failure: (result: ControlResult) => Error | undefined,
): void {
  done.then(
    (r) => {
      const e = failure(r);
      if (e !== undefined) stdout.destroy(e);
      else stdout.end();
    },
    (e: unknown) => stdout.destroy(e as Error),
  );
}
