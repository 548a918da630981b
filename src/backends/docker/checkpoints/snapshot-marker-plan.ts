/**
 * The snapshot quota across a fleet, the decisions (no engine calls here; the engine part is
 * snapshot-markers.ts). A snapshot under way on any replica holds a marker: a created, never
 * started container on the pool's first engine. A replica asking for a place makes its own
 * marker first, then lists the tenant's markers, then its snapshot images: of two replicas
 * asking at once, the one listing last sees the other's marker, so at the edge of the quota at
 * most one of them is admitted (both may be refused; never both admitted). A snapshot made
 * elsewhere has its image before its marker goes, so it is counted at least once.
 */
import { createHash } from 'node:crypto';

/** Labels of a marker (never `exec-server.instance`: recovery and the fleet must not adopt or count it). */
export const MARKER_LABEL = {
  /** The instance id of the fleet. */
  instance: 'exec-server.snapshot-marker-instance',
  tenant: 'exec-server.snapshot-marker-tenant',
  /** Milliseconds since the epoch when the marker was made. */
  created: 'exec-server.snapshot-marker-created',
} as const;

/**
 * A marker older than this is of a replica that died mid-snapshot: not counted, and removed by
 * whoever lists it. The longest a snapshot may take: a wake first (a restore, 2 min), a drain
 * (30 s), a checkpoint (2 min, and 15 s for the stop), the commit (10 min), keeping the
 * checkpoint, the restore (2 min); with a margin.
 */
export const STALE_MARKER_MS = 30 * 60_000;

const short = (s: string): string => createHash('sha256').update(s).digest('hex').slice(0, 12);

/** Name prefix of `tenant`'s markers in instance `instanceId` (hashes: a tenant may be any string). */
export function markerPrefix(instanceId: string, tenant: string): string {
  return `exec-server-snapmark-${short(instanceId)}-${short(tenant)}-`;
}

/** A marker as listed by the engine. */
export interface SeenMarker {
  /** Container id: a stale marker is removed by id. */
  readonly id: string;
  readonly createdMs: number;
}

/** When a listed marker was made: its label, else the engine's creation time (seconds). */
export function markerCreatedMs(labels: Readonly<Record<string, string>> | undefined, createdS: number): number {
  const label = Number(labels?.[MARKER_LABEL.created]);
  return Number.isSafeInteger(label) && label > 0 ? label : createdS * 1000;
}

/**
 * Sorts the tenant's listed markers: `live` count, `stale` are to be removed. `finished` are
 * this replica's own markers whose snapshot is over (their removal under way or failed): not
 * counted, as the image of a made one is in the listing and a failed one made none.
 */
export function sortMarkers(
  seen: readonly SeenMarker[],
  nowMs: number,
  finished: ReadonlySet<string>,
): { live: SeenMarker[]; stale: SeenMarker[] } {
  const counted = seen.filter((m) => !finished.has(m.id));
  return {
    live: counted.filter((m) => nowMs - m.createdMs < STALE_MARKER_MS),
    stale: counted.filter((m) => nowMs - m.createdMs >= STALE_MARKER_MS),
  };
}

/**
 * Whether one more snapshot fits: `images` in the engines, `others` markers of snapshots under
 * way besides the asker's own. `count` is what the tenant has without the asked one.
 */
export function snapshotFits(images: number, others: number, max: number): { fits: boolean; count: number } {
  const count = images + others;
  return { fits: count < max, count };
}

/**
 * Where `own` stands among the markers it was refused for: those listed with a lower id. Asked at
 * the same moment, each contender lists the same markers, so their ranks differ.
 */
export function rankOf(own: string, others: readonly SeenMarker[]): number {
  return others.filter((m) => m.id < own).length;
}

/**
 * How long a refused contender waits before it tries again: by rank, 250 ms apart (at most 4
 * ranks), so that contenders refused together try again one at a time and the first one fits; a
 * little randomness for those whose listings differed.
 */
export function retryDelayMs(rank: number, random: () => number = Math.random): number {
  return 50 + Math.min(rank, 4) * 250 + random() * 100;
}
