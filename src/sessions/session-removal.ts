/**
 * The teardown of a session that has left the server's list (deleted, reaped, or at shutdown),
 * tried again when the backend fails it. By then the session's DELETE has answered and nothing
 * else holds it, so a container whose removal the engine did not finish in time (a loaded
 * engine, an engine restarting) would otherwise stay, running and holding disk, until the next
 * start's recovery removed it (docs/architecture.md, "Who owns which state").
 */
import type { Logger } from '../logger.ts';

/**
 * The waits before the second, third and fourth tries. An engine past a remove's 15 s deadline
 * under load finished it about 3 s later (docs/benchmarks.md, "Past 1,000"); one restarting
 * takes tens of seconds.
 */
export const REMOVAL_RETRY_MS: readonly number[] = [5_000, 30_000, 120_000];

/** One session's teardown, as the session manager performs it. */
export interface Removal {
  readonly sessionId: string;
  /** The first try: the whole session (its processes, ports, files and backend). */
  first(): Promise<void>;
  /** A later try: the backend's part alone, the rest having run in the first. */
  again(): Promise<void>;
  /** After the backend is gone (a fleet's quota slot); a failure is tried again with it. */
  done(): Promise<void>;
  /** The server is stopping: what is left goes to the next start's recovery. */
  stopping(): boolean;
}

/**
 * Tears the session down; resolves after the first try, later tries run on timers that do
 * not hold the process open.
 */
export async function removeSession(r: Removal, log: Logger, delays = REMOVAL_RETRY_MS): Promise<void> {
  await attempt(r, log, delays, 0);
}

async function attempt(r: Removal, log: Logger, delays: readonly number[], n: number): Promise<void> {
  try {
    await (n === 0 ? r.first() : r.again());
    await r.done();
    if (n > 0) log.info({ sessionId: r.sessionId, tries: n + 1 }, 'session removed on a later try');
  } catch (err) {
    const wait = delays[n];
    if (wait === undefined || r.stopping()) {
      log.error(
        { sessionId: r.sessionId, err, tries: n + 1 },
        'session destroy failed; what is left of it goes at the next start',
      );
      return;
    }
    log.warn({ sessionId: r.sessionId, err, retryInMs: wait }, 'session destroy failed; trying again');
    setTimeout(() => void attempt(r, log, delays, n + 1), wait).unref();
  }
}
