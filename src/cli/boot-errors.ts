/**
 * What `exec-server serve` prints when it cannot start: one line naming the cause and the fix.
 * Expected failures (configuration, a port in use, no Docker engine) exit 2; anything else is
 * a bug and exits 1, still as one line (its stack goes to the log at debug level).
 */
import { ConfigError } from '../config/config-error.ts';
import { DEFAULT_DOCKER_SOCKET } from '../config/docker-host.ts';
import { listenPort } from '../config/listen.ts';
import { ExecServerError } from '../errors.ts';

/** What a boot failure's line may name: where the server was to listen and which engine it used. */
export interface BootContext {
  /** The `--listen` value. */
  readonly listen: string;
  /** The docker engine address the backend uses (for the message). */
  readonly dockerHost: string | undefined;
}

/** The line to print and the exit code: 2 for an expected failure, 1 for a bug. */
export interface BootFailure {
  readonly message: string;
  readonly exitCode: 1 | 2;
}

/** Maps a boot error to its one-line message and exit code. */
export function describeBootError(err: unknown, ctx: BootContext): BootFailure {
  if (err instanceof ConfigError) return { message: `invalid configuration: ${err.message}`, exitCode: 2 };
  const e = err as NodeJS.ErrnoException;
  const port = listenPort(ctx.listen) ?? 'PORT';
  const other = `choose another address with --listen ws://127.0.0.1:PORT (port 0 picks a free one)`;
  switch (e?.code) {
    case 'EADDRINUSE':
      return {
        message: `cannot listen on ${ctx.listen}: port ${port} is already in use (another exec-server?); stop that process or ${other}`,
        exitCode: 2,
      };
    case 'EACCES':
      return {
        message: `cannot listen on ${ctx.listen}: permission denied (ports below 1024 need privileges); ${other}`,
        exitCode: 2,
      };
    case 'EADDRNOTAVAIL':
      return {
        message: `cannot listen on ${ctx.listen}: that host is not an address of this machine; ${other}`,
        exitCode: 2,
      };
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return { message: `cannot listen on ${ctx.listen}: the host name does not resolve; ${other}`, exitCode: 2 };
  }
  if (err instanceof ExecServerError) {
    if (err.code === 'EXEC_ERR_BACKEND_UNAVAILABLE') {
      const where = ctx.dockerHost ?? `unix://${DEFAULT_DOCKER_SOCKET}`;
      return {
        message: `no Docker engine answers at ${where} (${err.message}); start one (bash scripts/start-dockerd.sh, or systemctl start docker), point --docker-host or DOCKER_HOST at it, or use --backend local`,
        exitCode: 2,
      };
    }
    if (err.code === 'EXEC_ERR_INSTANCE_IN_USE') return { message: err.message, exitCode: 2 };
    if (err.code === 'EXEC_ERR_CONFIG') return { message: `invalid configuration: ${err.message}`, exitCode: 2 };
  }
  const text = err instanceof Error ? err.message : String(err);
  return { message: `cannot start: ${text} (run with --log-level debug for details)`, exitCode: 1 };
}
