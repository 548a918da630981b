/**
 * Whether the host's process ids can hold the sessions this server may make. An idle runc
 * session holds about 16 host threads (most of them its containerd shim), each a process id;
 * when `kernel.pid_max` (or `kernel.threads-max`) runs out, runc fails with a message that does
 * not say so (docs/docker-backend.md, "Many sessions on one host"). The start-up check reads
 * this host only, so it applies to engines on a local socket: a remote engine's host is not ours
 * to read.
 */
import { readFile } from 'node:fs/promises';
import { DEFAULT_DOCKER_SOCKET, parseDockerHost } from '../../../config/docker-host.ts';

/** Host threads an idle runc session holds (measured 15.6; docs/benchmarks.md, "Past 1,000"). */
export const HOST_THREADS_PER_SESSION = 16;

/** The host's thread limit and the threads in use. */
export interface HostThreads {
  /** The lower of `kernel.pid_max` and `kernel.threads-max`. */
  readonly limit: number;
  /** Which of the two that is (`pid_max` or `threads-max`). */
  readonly limitName: 'pid_max' | 'threads-max';
  /** Threads on the host now (`/proc/loadavg`'s fourth field; the host's, not a namespace's). */
  readonly used: number;
}

/** Reads the host's limits; undefined where `/proc` does not give them (not Linux, a masked `/proc`). */
export async function readHostThreads(
  read: (path: string) => Promise<string> = (p) => readFile(p, 'utf8'),
): Promise<HostThreads | undefined> {
  try {
    const [pidMax, threadsMax, loadavg] = await Promise.all([
      read('/proc/sys/kernel/pid_max'),
      read('/proc/sys/kernel/threads-max'),
      read('/proc/loadavg'),
    ]);
    const used = Number(loadavg.split(' ')[3]?.split('/')[1]);
    const pid = Number(pidMax.trim());
    const threads = Number(threadsMax.trim());
    if (![used, pid, threads].every((n) => Number.isInteger(n) && n > 0)) return undefined;
    return pid <= threads
      ? { limit: pid, limitName: 'pid_max', used }
      : { limit: threads, limitName: 'threads-max', used };
  } catch {
    return undefined;
  }
}

/** The operator's warning when `sessions` more idle sessions would not fit; undefined when they do. */
export function pidShortfall(host: HostThreads, sessions: number): string | undefined {
  const fit = Math.max(0, Math.floor((host.limit - host.used) / HOST_THREADS_PER_SESSION));
  if (fit >= sessions) return undefined;
  return (
    `kernel.${host.limitName} is ${host.limit} with ${host.used} threads in use: room for about ${fit} ` +
    `sessions at ${HOST_THREADS_PER_SESSION} host threads each, fewer than --max-sessions ${sessions}. ` +
    `Past it the engine cannot start containers; raise kernel.${host.limitName} ` +
    `(docs/docker-backend.md, "Many sessions on one host")`
  );
}

/**
 * Engine messages of a process that could not be made: runc's child dying before it reported
 * (its fork refused), or a fork's EAGAIN.
 */
const OUT_OF_PIDS = /can't get final child's PID from pipe|resource temporarily unavailable|fork\/exec .*EAGAIN/i;

/** What an engine failure adds to its message when process ids may have run out; '' otherwise. */
export function pidHint(message: string): string {
  return OUT_OF_PIDS.test(message)
    ? ' (process ids may have run out: on the engine host, kernel.pid_max and kernel.threads-max; in the session, its pids limit)'
    : '';
}

/** True when one of `engines` (none: `DOCKER_HOST` or the default socket) is on this host. */
export function hasLocalEngine(engines: readonly string[], env: NodeJS.ProcessEnv = process.env): boolean {
  const hosts = engines.length > 0 ? engines : [env.DOCKER_HOST || DEFAULT_DOCKER_SOCKET];
  return hosts.some((h) => {
    try {
      return parseDockerHost(h, 'docker host').kind === 'socket';
    } catch {
      return false; // the configuration refused it at boot already
    }
  });
}

/**
 * Warns the operator at start when a local engine's host cannot hold `--max-sessions` idle
 * sessions: better a line in the log now than a runc error at session 1,950.
 */
export async function checkHostPids(
  engines: readonly string[],
  maxSessions: number,
  log: { warn(obj: object, msg: string): void },
  host: () => Promise<HostThreads | undefined> = readHostThreads,
): Promise<void> {
  if (!hasLocalEngine(engines)) return;
  const threads = await host();
  const shortfall = threads === undefined ? undefined : pidShortfall(threads, maxSessions);
  if (shortfall !== undefined) log.warn({ ...threads, maxSessions }, shortfall);
}
