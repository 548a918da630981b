/**
 * The tenant's snapshot quota (`--max-snapshots-per-tenant`): every snapshot, with or without
 * memory and a fork's too, holds a place from before anything is stopped or committed until it
 * is made or failed. The count is the engine's (the snapshot images the tenant has, which
 * survive restarts and are the same for every replica of a fleet) plus the places held by
 * snapshots under way on this server, so snapshots taken at once count each other.
 */
import { execError } from '../../../errors.ts';
import type { TenantId } from '../../../ids.ts';

/** Snapshots a tenant may have when the server's configuration names no number. */
export const DEFAULT_MAX_SNAPSHOTS = 100;

/** One snapshot under way: its image id once the engine made it; `refused` ones never make one. */
interface Place {
  snapshotId: string | undefined;
  refused: boolean;
}

/** A place held for one snapshot; `made` names its image, `release` gives the place back (once). */
export interface SnapshotPlace {
  made(snapshotId: string): void;
  release(): void;
}

/** Counts each tenant's snapshots against `max` and holds places for those under way. */
export class SnapshotQuota {
  readonly max: number;
  /** The tenant's snapshot ids in the engine(s). */
  readonly #list: (tenant: TenantId) => Promise<readonly string[]>;
  readonly #held = new Map<TenantId, Set<Place>>();

  constructor(max: number, list: (tenant: TenantId) => Promise<readonly string[]>) {
    this.max = max;
    this.#list = list;
  }

  /**
   * Holds a place for one more snapshot of `tenant`, or throws EXEC_ERR_SNAPSHOT_LIMIT. The place
   * is taken before the engine is asked, so a snapshot started meanwhile counts this one; this
   * one counts those under way when it asked. One of them that finished during the listing may
   * be in the list already: it counts once, by its image id.
   */
  async reserve(tenant: TenantId): Promise<SnapshotPlace> {
    const held = this.#held.get(tenant) ?? new Set<Place>();
    const before = [...held];
    const place: Place = { snapshotId: undefined, refused: false };
    held.add(place);
    this.#held.set(tenant, held);
    let released = false;
    const release = (): void => {
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
      const count = listed.size + underWay;
      if (count >= this.max)
        throw execError(
          'EXEC_ERR_SNAPSHOT_LIMIT',
          `snapshot quota reached: this tenant has ${count} of ${this.max} snapshots (--max-snapshots-per-tenant)${underWay > 0 ? `, ${underWay} of them being taken` : ''}; delete snapshots to make room`,
          { detail: { count, limit: this.max } },
        );
    } catch (err) {
      place.refused = true;
      release();
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
