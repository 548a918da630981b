/**
 * The disk watch of one session, for backends whose engine does not enforce the session's
 * disk limit itself (`BackendDisk.enforcement` `watch`: the local backend, docker without
 * `StorageOpt size`). Every `intervalMs` it measures the session's disk use; past the limit it
 * logs, counts, ends the session's processes, and refuses new starts (EXEC_ERR_DISK_LIMIT) until
 * a measurement, taken again at each start, finds the use back under the limit.
 */
import { execError } from '../errors.ts';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import type { SessionInfo } from '../protocol/index.ts';
import type { SessionCore } from './session-view.ts';

/**
 * Measurements in flight across all sessions of a server: each is a `du` process or an engine
 * walk of a writable layer, and hundreds of sessions must not start them all at once.
 */
export class MeasureSlots {
  readonly #max: number;
  #busy = 0;
  readonly #waiting: Array<() => void> = [];

  constructor(max: number) {
    this.#max = max;
  }

  /** Runs `fn` in a slot; when `wait` is false and none is free, resolves undefined at once. */
  async run<T>(fn: () => Promise<T>, wait: boolean): Promise<T | undefined> {
    if (this.#busy >= this.#max) {
      if (!wait) return undefined;
      await new Promise<void>((resolve) => this.#waiting.push(resolve));
    } else {
      this.#busy++;
    }
    try {
      return await fn();
    } finally {
      // The slot passes to the next waiter as it is, or frees.
      const next = this.#waiting.shift();
      if (next !== undefined) next();
      else this.#busy--;
    }
  }
}

/** What a session's disk watch shares with the server: its interval, the measurement slots, logs and metrics. */
export interface DiskWatchDeps {
  /** Between two measurements. */
  readonly intervalMs: number;
  /** Shared by the sessions of one server. */
  readonly slots: MeasureSlots;
  readonly log: Logger;
  readonly metrics: Metrics;
  readonly backendKind: string;
}

/** What `session/info` reports of the disk. */
export type DiskInfo = Pick<
  SessionInfo,
  'diskLimitBytes' | 'diskEnforcement' | 'diskUsedBytes' | 'diskMeasuredAt' | 'diskExceeded'
>;

/** What the disk watch uses of its session. */
interface Watched extends SessionCore {
  terminateAll(): Promise<number>;
}

const MIB = 1024 * 1024;

function mib(bytes: number): string {
  return `${(bytes / MIB).toFixed(1)} MiB`;
}

/** One session's disk watch: measures its use and stops the session past its limit. */
export class DiskWatch {
  readonly #session: Watched;
  readonly #deps: DiskWatchDeps;
  readonly #log: Logger;
  readonly limitBytes: number;
  #timer: NodeJS.Timeout | undefined;
  /** At most one measurement in flight: a slow `du` or engine walk is joined, never doubled. */
  #inflight: Promise<void> | undefined;
  #last: { readonly bytes: number; readonly atMs: number } | undefined;
  #exceeded = false;
  /** Ending the processes of an exceeded session, which takes their terminate grace. */
  #enforcing = false;

  constructor(session: Watched, deps: DiskWatchDeps) {
    this.#session = session;
    this.#deps = deps;
    this.#log = deps.log;
    this.limitBytes = session.spec.resources.diskMb * MIB;
  }

  /** Whether the server enforces the limit (the engine does not). */
  get watching(): boolean {
    return this.#session.backend.disk?.enforcement === 'watch';
  }

  /** Starts the periodic measurement when the server is the one to enforce the limit. */
  start(): void {
    if (!this.watching || this.#timer !== undefined) return;
    this.#timer = setInterval(() => void this.#tick(), this.#deps.intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  info(): DiskInfo {
    const disk = this.#session.backend.disk;
    if (disk === undefined) return {};
    return {
      diskLimitBytes: this.limitBytes,
      diskEnforcement: disk.enforcement,
      ...(this.#last !== undefined
        ? {
            diskUsedBytes: this.#last.bytes,
            diskMeasuredAt: new Date(this.#last.atMs).toISOString(),
            diskExceeded: this.#exceeded,
          }
        : {}),
    };
  }

  /**
   * Before a process starts: a session found past its limit is measured again (its files may
   * have been removed since) and, still past it, refused with the way out in the message.
   */
  async admit(): Promise<void> {
    if (!this.#exceeded) return;
    await this.#measure(true);
    const last = this.#last;
    if (!this.#exceeded || last === undefined) return;
    const diskMb = this.#session.spec.resources.diskMb;
    throw execError(
      'EXEC_ERR_DISK_LIMIT',
      `session disk use ${mib(last.bytes)} is past its limit of ${mib(this.limitBytes)} (resources.diskMb ${diskMb}): new processes are refused until files are removed (fs/remove), or start a new session with a larger resources.diskMb`,
      { detail: { usedBytes: last.bytes, limitBytes: this.limitBytes } },
    );
  }

  async #tick(): Promise<void> {
    const { status, backend } = this.#session;
    if (status.status === 'dead') {
      this.stop();
      return;
    }
    // A hibernated container writes nothing, and ending its processes would wake it.
    if (backend.hibernation !== undefined && backend.hibernation.state !== 'awake') return;
    const wasExceeded = this.#exceeded;
    // A round that finds every slot taken skips: the next one comes within the interval.
    await this.#measure(false);
    if (!this.#exceeded || this.#enforcing) return;
    if (!wasExceeded) {
      this.#deps.metrics.diskLimitExceeded.inc({ backend: this.#deps.backendKind });
      this.#log.warn(
        { usedBytes: this.#last?.bytes, limitBytes: this.limitBytes },
        'session is past its disk limit: ending its processes, refusing new ones',
      );
    }
    // Every round while past the limit: something may have been started in the background.
    this.#enforcing = true;
    try {
      await this.#session.terminateAll();
    } catch (err) {
      this.#log.warn({ err: (err as Error).message }, 'ending the processes of a session past its disk limit failed');
    } finally {
      this.#enforcing = false;
    }
  }

  /**
   * One measurement (joined when one is in flight), in a slot of the server's; `wait`: for a
   * free slot, else skipped when none is. A failed one changes nothing: the last stands.
   */
  #measure(wait: boolean): Promise<void> {
    const disk = this.#session.backend.disk;
    if (disk === undefined || disk.enforcement !== 'watch') return Promise.resolve();
    this.#inflight ??= (async () => {
      try {
        const bytes = await this.#deps.slots.run(() => disk.usage(), wait);
        if (bytes === undefined) return;
        this.#last = { bytes, atMs: Date.now() };
        const exceeded = bytes > this.limitBytes;
        if (this.#exceeded && !exceeded)
          this.#log.info({ usedBytes: bytes, limitBytes: this.limitBytes }, 'session is back under its disk limit');
        this.#exceeded = exceeded;
      } catch (err) {
        this.#log.debug({ err: (err as Error).message }, 'disk use not measured');
      } finally {
        this.#inflight = undefined;
      }
    })();
    return this.#inflight;
  }
}
