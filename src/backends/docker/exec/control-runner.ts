/**
 * Where a session's control commands run (sandbox preparation, the session record, workspace
 * aliases, every filesystem operation): through the exec agent when the session has one (a
 * command costs a frame, about a millisecond, instead of an engine exec), else as engine execs.
 * Same contract either way: bounded output, stdin fed with backpressure, stdout streamed with
 * backpressure for reads.
 */
import { PassThrough, Readable } from 'node:stream';
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import type { BackendExit, ProcessSink } from '../../types.ts';
import type { AgentChannel } from '../agent/agent-channel.ts';
import type { AgentProcess } from '../agent/agent-process.ts';
import { endWithResult, runControl, streamControl, type ControlOptions, type ControlResult } from './exec-runner.ts';

/** A control command whose stdout is streamed rather than collected. */
export interface StreamControlOptions {
  readonly cmd: string[];
  readonly user?: string | undefined;
  readonly timeoutMs: number;
  readonly stdin?: NodeJS.ReadableStream | undefined;
  readonly failure: (result: ControlResult) => Error | undefined;
}

/** How a session runs the server's small control commands: through its agent, or one engine exec each. */
export interface ControlRunner {
  run(o: ControlOptions): Promise<ControlResult>;
  stream(o: StreamControlOptions): Promise<{ stdout: Readable; done: Promise<ControlResult> }>;
}

/** Control commands as engine execs (a session without an agent). */
export function execRunner(container: Docker.Container): ControlRunner {
  return { run: (o) => runControl(container, o), stream: (o) => streamControl(container, o) };
}

/** stderr kept of a control command (it only ever carries an error message). */
const STDERR_LIMIT = 64 * 1024;

function exitCodeOf(exit: BackendExit, what: string): number {
  if (exit.kind === 'lost') throw execError('EXEC_ERR_BACKEND', `${what} lost: ${exit.reason}`);
  return exit.kind === 'exited' ? exit.code : 128 + exit.signo;
}

type Start = (
  o: { cmd: string[]; user?: string | undefined; stdin: boolean },
  sink: ProcessSink,
) => Promise<AgentProcess>;
type RunOptions = Parameters<ControlRunner['run']>[0];
type StreamOptions = Parameters<ControlRunner['stream']>[0];

/** Starts a control command through the agent: as `user` (root by default), unsandboxed, in `/`. */
function controlStarter(channel: AgentChannel, env: Readonly<Record<string, string>>): Start {
  return async (
    o: { cmd: string[]; user?: string | undefined; stdin: boolean },
    sink: ProcessSink,
  ): Promise<AgentProcess> => {
    const [uid, gid] = (o.user ?? '0:0').split(':').map(Number);
    return channel.spawn(
      {
        argv: o.cmd,
        cwd: '/',
        env,
        mode: o.stdin ? 'pipe' : 'pipe-no-stdin',
        size: { cols: 80, rows: 24 },
        sandbox: { kind: 'unrestricted' },
      },
      sink,
      { uid: uid ?? 0, gid: gid ?? uid ?? 0, sandboxType: 'none' },
    );
  };
}

/** A control command run to its end: its exit code and output (at most `maxStdout` bytes of stdout). */
async function agentRun(start: Start, o: RunOptions): Promise<ControlResult> {
  const max = o.maxStdout ?? 1024 * 1024;
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let outLen = 0;
  let errLen = 0;
  let overflow = false;
  let resolveExit!: (e: BackendExit) => void;
  const exited = new Promise<BackendExit>((r) => (resolveExit = r));
  const proc = await start(
    { cmd: o.cmd, user: o.user, stdin: o.stdin !== undefined },
    {
      output(stream, data) {
        if (stream === 'stderr') {
          if (errLen < STDERR_LIMIT) err.push(Buffer.from(data));
          errLen += data.length;
          return;
        }
        outLen += data.length;
        if (outLen > max) overflow = true;
        else out.push(Buffer.from(data));
      },
      exit: resolveExit,
    },
  );
  try {
    if (o.stdin !== undefined) await feed(proc, Buffer.isBuffer(o.stdin) ? Readable.from([o.stdin]) : o.stdin);
    const watch = setInterval(() => {
      if (overflow) void proc.signal('SIGKILL');
    }, 10);
    const exit = await exited.finally(() => clearInterval(watch));
    if (overflow) throw execError('EXEC_ERR_TOO_LARGE', `control command output exceeds ${max} bytes`);
    return {
      exitCode: exitCodeOf(exit, 'control command'),
      stdout: Buffer.concat(out),
      stderr: Buffer.concat(err).toString('utf8'),
    };
  } catch (e) {
    await proc.signal('SIGKILL');
    throw e;
  } finally {
    proc.dispose();
  }
}

/** A control command whose stdout is read as a stream, with backpressure to the agent. */
async function agentStream(
  start: Start,
  o: StreamOptions,
): Promise<{ stdout: PassThrough; done: Promise<ControlResult> }> {
  const stdout = new PassThrough({ highWaterMark: 256 * 1024 });
  const err: Buffer[] = [];
  let proc: AgentProcess | undefined;
  /** Whether a wait for the reader to drain `stdout` is set: one, however many chunks find it full. */
  let draining = false;
  let resolveExit!: (e: BackendExit) => void;
  const exited = new Promise<BackendExit>((r) => (resolveExit = r));
  proc = await start(
    { cmd: o.cmd, user: o.user, stdin: o.stdin !== undefined },
    {
      output(stream, data) {
        if (stream === 'stderr') {
          if (err.length < 64) err.push(Buffer.from(data));
          return;
        }
        if (stdout.destroyed) return;
        // Backpressure: the agent stops reading the command while the reader is behind. What
        // it had already sent (up to its window) still arrives and finds `stdout` full too: one
        // wait serves every such chunk (a listener each would pass Node's limit of ten).
        if (!stdout.write(Buffer.from(data))) {
          proc?.pauseOutput();
          if (draining) return;
          draining = true;
          stdout.once('drain', () => {
            draining = false;
            proc?.resumeOutput();
          });
        }
      },
      exit: resolveExit,
    },
  );
  stdout.once('close', () => {
    if (!stdout.readableEnded) void proc?.signal('SIGKILL');
  });
  if (o.stdin !== undefined) void feed(proc, o.stdin).catch(() => proc?.signal('SIGKILL'));
  const done = (async (): Promise<ControlResult> => {
    try {
      const exit = await exited;
      return {
        exitCode: exitCodeOf(exit, 'command'),
        stdout: Buffer.alloc(0),
        stderr: Buffer.concat(err).toString('utf8'),
      };
    } finally {
      proc?.dispose();
    }
  })();
  endWithResult(stdout, done, o.failure);
  return { stdout, done };
}

/** Control commands through the session's exec agent (a frame each, no engine exec). */
export function agentRunner(channel: AgentChannel, env: Readonly<Record<string, string>>): ControlRunner {
  const start = controlStarter(channel, env);
  return { run: (o) => agentRun(start, o), stream: (o) => agentStream(start, o) };
}

/** Feeds `source` to the command's stdin, never more than the agent's stdin budget ahead, then closes it. */
async function feed(proc: AgentProcess, source: NodeJS.ReadableStream): Promise<void> {
  for await (const chunk of source as AsyncIterable<Buffer | string>) {
    const data = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    await proc.stdinRoom(data.length);
    await proc.write(data);
  }
  await proc.closeStdin();
}
