/**
 * The snapshot quota across a fleet: the decisions (src/backends/docker/checkpoints/
 * snapshot-marker-plan.ts) and FleetSnapshotQuota's use of markers, over a fake engine that two
 * "replicas" share. The real engine is test/docker/fleet-snapshot-quota.test.ts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  MARKER_LABEL,
  markerCreatedMs,
  markerPrefix,
  rankOf,
  retryDelayMs,
  type SeenMarker,
  STALE_MARKER_MS,
  snapshotFits,
  sortMarkers,
} from '../../src/backends/docker/checkpoints/snapshot-marker-plan.ts';
import type { MarkerStore } from '../../src/backends/docker/checkpoints/snapshot-markers.ts';
import { createSnapshotQuota, type SnapshotQuota } from '../../src/backends/docker/checkpoints/snapshot-quota.ts';
import { asTenantId } from '../../src/ids.ts';

const T = asTenantId('team');

test('marker names are valid container names, per instance and tenant', () => {
  const DOCKER_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]+$/;
  for (const tenant of ['team-a', 'Ünïcode tenant', 'a/b:c', ''])
    assert.match(`${markerPrefix('prod', tenant)}0a1b`, DOCKER_NAME, tenant);
  assert.notEqual(markerPrefix('prod', 'a'), markerPrefix('prod', 'b'));
  assert.notEqual(markerPrefix('prod', 'a'), markerPrefix('staging', 'a'));
  assert.ok(!Object.values(MARKER_LABEL).includes('exec-server.instance' as never), 'recovery must not adopt markers');
});

test('a marker is as old as its label says, else as the engine says', () => {
  assert.equal(markerCreatedMs({ [MARKER_LABEL.created]: '1700000000123' }, 5), 1700000000123);
  assert.equal(markerCreatedMs({ [MARKER_LABEL.created]: 'soon' }, 5), 5000);
  assert.equal(markerCreatedMs(undefined, 7), 7000);
});

test('markers: finished ones never count, old ones are stale, the rest count', () => {
  const now = 10 * STALE_MARKER_MS;
  const seen: SeenMarker[] = [
    { id: 'fresh', createdMs: now - 1000 },
    { id: 'edge', createdMs: now - STALE_MARKER_MS + 1 },
    { id: 'dead', createdMs: now - STALE_MARKER_MS },
    { id: 'mine-done', createdMs: now },
  ];
  const { live, stale } = sortMarkers(seen, now, new Set(['mine-done']));
  assert.deepEqual(
    live.map((m) => m.id),
    ['fresh', 'edge'],
  );
  assert.deepEqual(
    stale.map((m) => m.id),
    ['dead'],
  );
  assert.deepEqual(snapshotFits(1, 0, 2), { fits: true, count: 1 });
  assert.deepEqual(snapshotFits(1, 1, 2), { fits: false, count: 2 });
  assert.deepEqual(snapshotFits(2, 0, 2), { fits: false, count: 2 });
});

test('contenders refused together try again one at a time: by rank, 250 ms apart', () => {
  // Three contenders that all listed the same three markers: three ranks.
  const seen: SeenMarker[] = ['c', 'a', 'b'].map((id) => ({ id, createdMs: 0 }));
  const others = (own: string) => seen.filter((m) => m.id !== own);
  assert.deepEqual(
    ['a', 'b', 'c'].map((own) => rankOf(own, others(own))),
    [0, 1, 2],
  );
  assert.equal(
    retryDelayMs(0, () => 0),
    50,
  );
  assert.equal(
    retryDelayMs(1, () => 0.999),
    50 + 250 + 99.9,
  );
  assert.equal(
    retryDelayMs(40, () => 0),
    50 + 4 * 250,
    'bounded',
  );
  assert.ok(retryDelayMs(0, () => 0.999) < retryDelayMs(1, () => 0), 'ranks never overlap');
});

/** An engine's markers and images as two replicas see them; `failRemove` makes removes fail. */
class FakeEngine implements MarkerStore {
  readonly markers = new Map<string, SeenMarker>();
  images = 0;
  creates = 0;
  failRemove = false;
  #next = 0;
  /** Held lists wait for this (both replicas' markers made before either lists). */
  gate: Promise<void> | undefined;

  async create(): Promise<string> {
    this.creates++;
    const id = `m${this.#next++}`;
    this.markers.set(id, { id, createdMs: Date.now() });
    return id;
  }
  async list(): Promise<SeenMarker[]> {
    await this.gate;
    return [...this.markers.values()];
  }
  async remove(id: string): Promise<void> {
    if (this.failRemove) throw new Error('engine says no');
    this.markers.delete(id);
  }
  readonly listImages = async (): Promise<string[]> => Array.from({ length: this.images }, (_, i) => `sha256:${i}`);
}

/** A replica's quota over `engine`; its delays before trying again are `backoff`, the ranks it asked with go to `ranks`. */
function replica(engine: FakeEngine, backoff: number, warned: string[] = [], ranks: number[] = []): SnapshotQuota {
  return createSnapshotQuota(2, engine.listImages, {
    markers: engine,
    log: { warn: (_o: unknown, msg: string) => warned.push(msg) },
    backoffMs: (rank) => {
      ranks.push(rank);
      return backoff;
    },
  });
}

test('two replicas at the edge: never both admitted; a refusal with others under way is tried again', async () => {
  const engine = new FakeEngine();
  engine.images = 1;
  const ranksA: number[] = [];
  const ranksB: number[] = [];
  const a = replica(engine, 0, [], ranksA);
  const b = replica(engine, 30, [], ranksB);
  let open!: () => void;
  engine.gate = new Promise((r) => {
    open = r;
  });
  const both = Promise.allSettled([a.reserve(T), b.reserve(T)]);
  // Both markers are made before either replica lists: each counts the other's and refuses.
  const until = Date.now() + 2000;
  while (engine.creates < 2) {
    assert.ok(Date.now() < until, 'each replica makes its marker before it lists');
    await new Promise((r) => setImmediate(r));
  }
  engine.gate = undefined;
  open();
  const [ra, rb] = await both;
  assert.equal(ra.status, 'fulfilled', 'a, trying again first, finds room');
  assert.equal(rb.status, 'rejected', 'b finds a under way at each attempt');
  assert.equal((rb.reason as { code?: string }).code, 'EXEC_ERR_SNAPSHOT_LIMIT');
  assert.match((rb.reason as Error).message, /2 of 2 snapshots .*1 of them being taken/);
  assert.equal(engine.creates, 2 + 1 + 2, 'a: 2 attempts, b: 3');
  assert.deepEqual([ranksA[0], ranksB[0]], [0, 1], 'refused together, they wait by rank: a (lower id) first');
  assert.equal(engine.markers.size, 1, "only a's place is held; refused markers are gone");

  // a's snapshot made: its image counts, its marker goes. b is refused at once (no one under way).
  engine.images = 2;
  ra.value.made('sha256:new');
  ra.value.release();
  await new Promise((r) => setImmediate(r));
  assert.equal(engine.markers.size, 0);
  const before = engine.creates;
  await assert.rejects(b.reserve(T), /2 of 2 snapshots \(--max/);
  assert.equal(engine.creates, before + 1, 'a refusal with no one under way is not tried again');
});

test("a marker of a dead replica is stale: ignored and removed; one's own that failed to go is not counted by it", async () => {
  const engine = new FakeEngine();
  engine.images = 1;
  engine.markers.set('dead', { id: 'dead', createdMs: Date.now() - STALE_MARKER_MS - 1 });
  const warned: string[] = [];
  const a = replica(engine, 0, warned);
  const b = replica(engine, 0);
  const place = await a.reserve(T);
  assert.ok(!engine.markers.has('dead'), 'removed by whoever listed it');

  // a's snapshot failed and its marker cannot be removed: warned, and a no longer counts it.
  engine.failRemove = true;
  place.release();
  await new Promise((r) => setImmediate(r));
  assert.equal(warned.length, 1);
  assert.match(warned[0]!, /snapshot marker not removed/);
  assert.equal(engine.markers.size, 1);
  engine.failRemove = false;
  const again = await a.reserve(T);
  again.release();
  // b does not know that snapshot is over: the left marker counts for it until it is stale.
  await assert.rejects(b.reserve(T), /2 of 2 snapshots .*1 of them being taken/);
});

test('a lone server (no fleet) keeps its places in memory: no marker is made', async () => {
  const engine = new FakeEngine();
  const lone = createSnapshotQuota(2, engine.listImages);
  const first = await lone.reserve(T);
  await lone.reserve(T);
  await assert.rejects(lone.reserve(T), /2 of 2 snapshots .*2 of them being taken/);
  first.release();
  assert.equal(engine.creates, 0);
});
