/**
 * `fs/watchMissing` watches: paths expected absent (or present) are polled, and the client is sent
 * `fs/missingChanged` when one of them appears or goes away. Bounded per session and per watch.
 * A watch id is the client's own: every connection to a session names its watches as it likes
 * (Codex numbers them from 1), so a second client's `1` neither replaces nor unwatches the first's.
 */
import { execError } from '../../errors.ts';
import type { NotificationName, NotificationParams } from '../../protocol/index.ts';
import type { SessionCore } from '../session-view.ts';
import type { FileLimits } from './file-limits.ts';
import { isNotFound, type Checker } from './path-checker.ts';

/** Something that can receive `fs/missingChanged` (a WebSocket connection). False once it is gone. */
export interface WatchNotifier {
  notify<N extends NotificationName>(method: N, params: NotificationParams<N>): boolean;
}

interface Watch {
  /** Its key here: the connection's and the client's id. */
  readonly id: string;
  /** The id as the client sent it (Codex uses numbers), echoed in `fs/missingChanged`. */
  readonly wireId: string | number;
  readonly notifier: WatchNotifier;
  /** Path (in the session) -> whether it was there at the last look. */
  readonly state: Map<string, boolean>;
}

/** The watches of one session, and the poller that runs while there are any. */
export class MissingWatches {
  readonly #session: Pick<SessionCore, 'backend'>;
  readonly #limits: FileLimits;
  readonly #watches = new Map<string, Watch>();
  /** A number per connection, for the keys of its watches. */
  readonly #clients = new WeakMap<WatchNotifier, number>();
  #nextClient = 0;
  #poller: NodeJS.Timeout | undefined;
  #polling = false;
  #closed = false;

  constructor(session: Pick<SessionCore, 'backend'>, limits: FileLimits) {
    this.#session = session;
    this.#limits = limits;
  }

  /**
   * Watches `missing` (expected absent) and `present` (expected there) under `wireId`, replacing
   * a watch of that id. The limits are checked before `checker` is asked for the sandbox, which
   * must allow reading every path.
   */
  async add(
    wireId: string | number,
    missing: readonly string[],
    present: readonly string[],
    notifier: WatchNotifier,
    checker: () => Promise<Checker>,
  ): Promise<void> {
    const watchId = this.#key(notifier, wireId);
    if (missing.length + present.length > this.#limits.maxWatchPaths) {
      throw execError('EXEC_ERR_TOO_LARGE', `a watch may cover at most ${this.#limits.maxWatchPaths} paths`, {
        detail: { field: 'missing' },
      });
    }
    this.#assertRoomFor(watchId);
    const check = await checker();
    // The session closed meanwhile: a watch stored now would start a poller nothing stops.
    if (this.#closed) throw execError('EXEC_ERR_SESSION_DEAD', 'the session is going away');
    // Again after the await: the requests of one batch (or of frames read together) all pass
    // the first check before any of them gets here.
    this.#assertRoomFor(watchId);
    const state = new Map<string, boolean>();
    for (const [paths, there] of [
      [missing, false],
      [present, true],
    ] as const) {
      for (const path of paths) {
        check.read(path, 'watch');
        state.set(path, there);
      }
    }
    this.#watches.set(watchId, { id: watchId, wireId, notifier, state });
    if (!this.#poller) {
      this.#poller = setInterval(() => void this.#poll(), this.#limits.watchIntervalMs);
      this.#poller.unref();
    }
  }

  #key(notifier: WatchNotifier, wireId: string | number): string {
    let client = this.#clients.get(notifier);
    if (client === undefined) {
      client = this.#nextClient++;
      this.#clients.set(notifier, client);
    }
    return `${client}:${String(wireId)}`;
  }

  #assertRoomFor(watchId: string): void {
    if (!this.#watches.has(watchId) && this.#watches.size >= this.#limits.maxWatches) {
      throw execError(
        'EXEC_ERR_INVALID_REQUEST',
        `too many watches in this session (limit ${this.#limits.maxWatches}); drop some with fs/unwatch`,
      );
    }
  }

  /** Drops the watch `wireId` of `notifier`'s client; false when it has none of that id. */
  remove(wireId: string | number, notifier: WatchNotifier): boolean {
    const had = this.#watches.delete(this.#key(notifier, wireId));
    this.#stopPollerIfIdle();
    return had;
  }

  /** Drops the watches of a client that went away. */
  dropWatchesOf(notifier: WatchNotifier): void {
    for (const watch of [...this.#watches.values()]) if (watch.notifier === notifier) this.#watches.delete(watch.id);
    this.#stopPollerIfIdle();
  }

  /** Drops every watch and stops polling for good (the session is going away). */
  close(): void {
    this.#closed = true;
    this.#watches.clear();
    if (this.#poller) clearInterval(this.#poller);
    this.#poller = undefined;
  }

  #stopPollerIfIdle(): void {
    if (this.#watches.size === 0 && this.#poller) {
      clearInterval(this.#poller);
      this.#poller = undefined;
    }
  }

  async #poll(): Promise<void> {
    if (this.#polling || this.#closed) return;
    this.#polling = true;
    try {
      for (const watch of [...this.#watches.values()]) {
        let changed = false;
        for (const [path, was] of watch.state) {
          const is = await this.#session.backend.fs.stat(path).then(
            () => true,
            (err: unknown) => (isNotFound(err) ? false : was),
          );
          if (is !== was) {
            watch.state.set(path, is);
            changed = true;
          }
        }
        if (!this.#watches.has(watch.id)) continue;
        if (changed && !watch.notifier.notify('fs/missingChanged', { watchId: watch.wireId }))
          this.#watches.delete(watch.id);
      }
    } catch {
      // A dying session: the next tick (or close) settles it.
    } finally {
      this.#polling = false;
      this.#stopPollerIfIdle();
    }
  }
}
