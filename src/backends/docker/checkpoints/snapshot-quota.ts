/**
 * The tenant's snapshot quota (`--max-snapshots-per-tenant`): every snapshot, with or without
 * memory and a fork's too, holds a place from before anything is stopped or committed until it
 * is made or failed. The count is the engine's (the snapshot images the tenant has, which
 * survive restarts and are the same for every replica of a fleet) plus the places held by
 * snapshots under way, so snapshots taken at once count each other: on a lone server the places
 * are in its memory (`LocalSnapshotQuota`); in a fleet they are markers in the engine
 * (`FleetSnapshotQuota`, snapshot-marker-plan.ts), which every replica sees.
 */
import { type ExecServerError, execError } from '../../../errors.ts';
import type { TenantId } from '../../../ids.ts';
import type { DockerLogger } from '../options.ts';
import { rankOf, retryDelayMs, type SeenMarker, snapshotFits, sortMarkers } from './snapshot-marker-plan.ts';
import type { MarkerStore } from './snapshot-markers.ts';

/** Snapshots a tenant may have when the server's configuration names no number. */
export const DEFAULT_MAX_SNAPSHOTS = 100;

/**
 * A place held for one snapshot; `made` names its image, `release` gives the place back (once;
 * resolved when it is given back, never rejected).
 */
export interface SnapshotPlace {
  made(snapshotId: string): void;
  release(): Promise<void>;
}

/** Counts each tenant's snapshots against `max` and holds places for those under way. */
export interface SnapshotQuota {
  readonly max: number;
  /**
   * Holds a place for one more snapshot of `tenant`, or throws EXEC_ERR_SNAPSHOT_LIMIT. The place
   * is taken before the engine is asked, so a snapshot started meanwhile counts this one; this
   * one counts those under way when it asked.
   */
  reserve(tenant: TenantId): Promise<SnapshotPlace>;
}

/** The tenant's snapshot ids in the engine(s). */
type ListSnapshots = (tenant: TenantId) => Promise<readonly string[]>;

/** In a fleet: the markers of snapshots under way, and where a marker that cannot be removed is told. */
export interface FleetPlaces {
  readonly markers: MarkerStore;
  readonly log: Pick<DockerLogger, 'warn'>;
  /** The delay before a refused attempt is tried again, by its rank (`retryDelayMs` unless a test sets it). */
  readonly backoffMs?: ((rank: number) => number) | undefined;
}

/** With `fleet`, places are markers in the engine instead of this process's memory (never both: they would count twice). */
export function createSnapshotQuota(max: number, list: ListSnapshots, fleet?: FleetPlaces): SnapshotQuota {
  return fleet === undefined ? new LocalSnapshotQuota(max, list) : new FleetSnapshotQuota(max, list, fleet);
}

/** EXEC_ERR_SNAPSHOT_LIMIT unless one more fits under `max` besides `images` and `underWay`. */
function quotaRefusal(max: number, images: number, underWay: number): ExecServerError | undefined {
  const { fits, count } = snapshotFits(images, underWay, max);
  if (fits) return undefined;
  return execError(
    'EXEC_ERR_SNAPSHOT_LIMIT',
    `snapshot quota reached: this tenant has ${count} of ${max} snapshots (--max-snapshots-per-tenant)${underWay > 0 ? `, ${underWay} of them being taken` : ''}; delete snapshots to make room`,
    { detail: { count, limit: max } },
  );
}

/** One snapshot under way: its image id once the engine made it; `refused` ones never make one. */
interface Place {
  snapshotId: string | undefined;
  refused: boolean;
}

/** A lone server's quota: the places of snapshots under way are in this process's memory. */
export class LocalSnapshotQuota implements SnapshotQuota {
  readonly max: number;
  readonly #list: ListSnapshots;
  readonly #held = new Map<TenantId, Set<Place>>();

  constructor(max: number, list: ListSnapshots) {
    this.max = max;
    this.#list = list;
  }

  /** One of those under way that finished during the listing may be in the list already: it counts once, by its image id. */
  async reserve(tenant: TenantId): Promise<SnapshotPlace> {
    const held = this.#held.get(tenant) ?? new Set<Place>();
    const before = [...held];
    const place: Place = { snapshotId: undefined, refused: false };
    held.add(place);
    this.#held.set(tenant, held);
    let released = false;
    const release = async (): Promise<void> => {
      if (released) return;
      released = true;
      held.delete(place);
      if (held.size === 0 && this.#held.get(tenant) === held) this.#held.delete(tenant);
    };
    try {
      const listed = new Set(await this.#list(tenant));
      // One that failed later still counts here: whether its image was removed is not known.
      const underWay = before.filter(
        (p) => !p.refused && (p.snapshotId === undefined || !listed.has(p.snapshotId)),
      ).length;
      const refusal = quotaRefusal(this.max, listed.size, underWay);
      if (refusal !== undefined) throw refusal;
    } catch (err) {
      place.refused = true;
      await release();
      throw err;
    }
    return {
      made: (snapshotId) => {
        place.snapshotId = snapshotId;
      },
      release,
    };
  }
}

/** Attempts of a fleet reserve refused while other snapshots were under way (see `FleetSnapshotQuota.reserve`). */
const MARKED_ATTEMPTS = 3;

/** A fleet's quota: the places of snapshots under way are markers in the engine, which every replica sees. */
export class FleetSnapshotQuota implements SnapshotQuota {
  readonly max: number;
  readonly #list: ListSnapshots;
  readonly #fleet: FleetPlaces;
  /** This replica's markers whose snapshot is over (removal under way or failed), by id: with their tenant. */
  readonly #finished = new Map<string, TenantId>();

  constructor(max: number, list: ListSnapshots, fleet: FleetPlaces) {
    this.max = max;
    this.#list = list;
    this.#fleet = fleet;
  }

  /**
   * The fleet's way (snapshot-marker-plan.ts). Snapshots asked at the same moment at the edge
   * of the quota each count the others' markers and may all be refused: a refusal while others
   * are under way and the images alone leave room is tried again after a delay by its rank
   * (`retryDelayMs`), so that apart one of them fits. Each attempt counts as the plan says:
   * none of them passes the quota.
   */
  async reserve(tenant: TenantId): Promise<SnapshotPlace> {
    for (let attempt = 1; ; attempt++) {
      const outcome = await this.#attempt(tenant);
      if (outcome.refusal === undefined) return outcome.place;
      if (outcome.rank === undefined || attempt >= MARKED_ATTEMPTS) throw outcome.refusal;
      const ms = (this.#fleet.backoffMs ?? retryDelayMs)(outcome.rank);
      await new Promise((r) => setTimeout(r, ms));
    }
  }

  /**
   * Own marker, then the markers, then the images, in that order: a snapshot that finished
   * elsewhere during the listings counts at least once (its image is made before its marker
   * goes); one whose image is made but whose marker is not yet removed counts twice for that
   * moment, which may refuse at the edge of the quota but never lets it be passed.
   */
  async #attempt(
    tenant: TenantId,
  ): Promise<
    | { place: SnapshotPlace; refusal?: undefined }
    | { refusal: ExecServerError; rank: number | undefined; place?: undefined }
  > {
    const { markers } = this.#fleet;
    const own = await markers.create(tenant);
    let images: number;
    let others: SeenMarker[];
    try {
      const seen = await markers.list(tenant);
      images = (await this.#list(tenant)).length;
      // Own markers that failed to go and are no longer listed (removed as stale) are forgotten.
      const listed = new Set(seen.map((m) => m.id));
      for (const [id, t] of this.#finished) if (t === tenant && !listed.has(id)) this.#finished.delete(id);
      const { live, stale } = sortMarkers(seen, Date.now(), new Set(this.#finished.keys()));
      // By id: a dead replica's marker; one already gone is no error, and another failure only leaves it for later.
      await Promise.all(stale.map((m) => markers.remove(m.id).catch(() => undefined)));
      others = live.filter((m) => m.id !== own);
    } catch (err) {
      await this.#finish(own, tenant);
      throw err;
    }
    const refusal = quotaRefusal(this.max, images, others.length);
    if (refusal !== undefined) {
      // Removed before anyone tries again (this replica or another): left behind, it would refuse them.
      await this.#finish(own, tenant);
      // Tried again only while others under way refuse it: the images alone leave room.
      const contended = others.length > 0 && images < this.max;
      return { refusal, rank: contended ? rankOf(own, others) : undefined };
    }
    // Awaited by the snapshot before it answers: a marker still there then would count against
    // the client's next snapshot on another replica (its image counts already), and one whose
    // removal was under way at shutdown would be left to go stale. Its own failure is warned.
    let finished: Promise<void> | undefined;
    const release = (): Promise<void> => {
      finished ??= this.#finish(own, tenant);
      return finished;
    };
    return { place: { made: () => undefined, release } };
  }

  /** Removes this replica's marker `own`; not counted here from now on, removed or not. */
  async #finish(own: string, tenant: TenantId): Promise<void> {
    this.#finished.set(own, tenant);
    try {
      await this.#fleet.markers.remove(own);
      this.#finished.delete(own);
    } catch (err) {
      this.#fleet.log.warn(
        { tenant, marker: own, err: (err as Error).message },
        'snapshot marker not removed: it counts for other replicas until it is stale',
      );
    }
  }
}
