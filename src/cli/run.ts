/**
 * `exec-server run [--url U] [--token T] [--image I] [--allow-network ENTRY]... [--tty] [--json] [--keep] -- CMD ARGS...`
 * One shot: creates a session, runs the command streaming its output (stdout to stdout,
 * stderr to stderr, a PTY to stdout), exits with the command's exit code, deletes the session.
 * Piped stdin is forwarded; Ctrl-C interrupts the remote command (twice: terminates it).
 */
import type { ParseArgsConfig } from 'node:util';
import type { ExecServerClient } from '../client/client.ts';
import {
  clientCommand,
  connectNewSession,
  sessionCreationOptions,
  EXIT_USAGE,
  shellExitCode,
  UsageError,
} from './common.ts';

/** `exec-server run --help`. */
export const RUN_HELP = `Usage: exec-server run [options] -- CMD [ARGS...]

Creates a session, runs CMD in it, streams its output, exits with its exit code and deletes the session.

Options:
  --url URL      server (default $EXEC_SERVER_URL or ws://127.0.0.1:8765)
  --token T      bearer token (default $EXEC_SERVER_TOKEN)
  --image I      session image (docker backend)
  --allow-network ENTRY
                 reach ENTRY through the session's egress proxy (repeatable; docs/protocol.md, "Egress"):
                 *, host, host:port, *.domain[:port], ip[:port], cidr[:port]
  --tty          run in a pseudo-terminal (stdin forwarded in raw mode when it is a terminal)
  --cwd DIR      working directory inside the session
  --env K=V      extra environment variable (repeatable)
  --json         print one JSON object {sessionId, exitCode, stdout, stderr, ...} instead of streaming
  --keep         keep the session (print its id on stderr)
  -v, --verbose  progress on stderr
Exit status: the command's exit code; ${EXIT_USAGE} for usage errors; 125 when exec-server itself fails.`;

const RUN_OPTIONS = {
  ...sessionCreationOptions,
  tty: { type: 'boolean', default: false },
  cwd: { type: 'string' },
  env: { type: 'string', multiple: true },
  keep: { type: 'boolean', default: false },
  verbose: { type: 'boolean', short: 'v', default: false },
} as const satisfies ParseArgsConfig['options'];

/** `exec-server run`: one command in a new session, its exit code as the CLI's. */
export function runCommand(args: string[]): Promise<number> {
  return clientCommand(args, RUN_OPTIONS, RUN_HELP, async ({ values, positionals }) => {
    if (positionals.length === 0)
      throw new UsageError('run needs a command: exec-server run [options] -- CMD [ARGS...]');
    const env: Record<string, string> = {};
    for (const kv of values.env ?? []) {
      const i = kv.indexOf('=');
      if (i <= 0) throw new UsageError(`--env expects KEY=VALUE, got ${JSON.stringify(kv)}`);
      env[kv.slice(0, i)] = kv.slice(i + 1);
    }
    const progress = (msg: string): void => {
      if (values.verbose) process.stderr.write(`[exec-server] ${msg}\n`);
    };
    const client = await connectNewSession(values);
    progress(`session ${client.sessionId} created`);
    try {
      return await runIn(client, positionals, {
        tty: values.tty === true,
        json: values.json === true,
        cwd: values.cwd,
        env,
        progress,
      });
    } finally {
      if (values.keep) {
        // The session lives on without us; an open connection would keep this process alive.
        await client.disconnect().catch(() => undefined);
        process.stderr.write(`[exec-server] session kept: ${client.sessionId}\n`);
      } else {
        await client
          .deleteSession()
          .catch((err) =>
            process.stderr.write(
              `exec-server: could not delete session ${client.sessionId}: ${(err as Error).message}\n`,
            ),
          );
        progress(`session ${client.sessionId} deleted`);
      }
    }
  });
}

async function runIn(
  client: ExecServerClient,
  argv: string[],
  opts: {
    tty: boolean;
    json: boolean;
    cwd: string | undefined;
    env: Record<string, string>;
    progress: (m: string) => void;
  },
): Promise<number> {
  const stdin = process.stdin;
  const interactiveTty = opts.tty && stdin.isTTY === true;
  const forwardStdin = opts.tty ? interactiveTty : stdin.isTTY !== true;
  const size = process.stdout.isTTY ? { cols: process.stdout.columns, rows: process.stdout.rows } : undefined;
  const handle = await client.exec(argv, {
    tty: opts.tty,
    check: false,
    collect: opts.json,
    cwd: opts.cwd,
    env: Object.keys(opts.env).length > 0 ? opts.env : undefined,
    stdin: forwardStdin && !opts.tty ? 'pipe' : undefined,
    size: opts.tty ? size : undefined,
  });
  opts.progress(`process ${handle.processId} started: ${argv.join(' ')}`);
  if (!opts.json) {
    handle.onOutput((c) => {
      if (c.data.length > 0) (c.stream === 'stderr' ? process.stderr : process.stdout).write(c.data);
    });
  }
  const cleanups: Array<() => void> = [];
  if (forwardStdin) {
    if (interactiveTty) stdin.setRawMode(true);
    const onData = (d: Buffer): void => void handle.sendStdin(d).catch(() => undefined);
    const onEnd = (): void => void handle.closeStdin().catch(() => undefined);
    stdin.on('data', onData);
    stdin.on('end', onEnd);
    stdin.resume();
    cleanups.push(() => {
      stdin.off('data', onData);
      stdin.off('end', onEnd);
      if (interactiveTty) stdin.setRawMode(false);
      stdin.pause();
    });
  }
  if (opts.tty && process.stdout.isTTY) {
    const onResize = (): void => void handle.resize(process.stdout.columns, process.stdout.rows).catch(() => undefined);
    process.stdout.on('resize', onResize);
    cleanups.push(() => process.stdout.off('resize', onResize));
  }
  let interrupts = 0;
  const onSigint = (): void => {
    interrupts++;
    void (interrupts === 1 ? handle.kill('interrupt') : handle.kill()).catch(() => undefined);
  };
  process.on('SIGINT', onSigint);
  cleanups.push(() => process.off('SIGINT', onSigint));
  try {
    const result = await handle.wait({ check: false });
    opts.progress(`process ended: ${result.terminal}, exit code ${result.exitCode}`);
    if (opts.json) {
      process.stdout.write(
        `${JSON.stringify({ sessionId: client.sessionId, processId: result.processId, argv, exitCode: result.exitCode, terminal: result.terminal, signal: result.signal ?? null, sandboxDenied: result.sandboxDenied, stdout: result.stdout, stderr: result.stderr, pty: result.pty })}\n`,
      );
    }
    return shellExitCode(result.exitCode);
  } finally {
    for (const c of cleanups) c();
  }
}
