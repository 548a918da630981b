/** Warm-pool sizing (src/backends/docker/container/pool-sizing.ts) and the create gate (create-gate.ts). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CreateGate } from '../../src/backends/docker/container/create-gate.ts';
import { PoolDemand, refillStep, shrinkStep } from '../../src/backends/docker/container/pool-sizing.ts';

test('a quiet pool holds its minimum; demand sizes it up to its maximum', () => {
  const d = new PoolDemand({ min: 2, max: 64, burstMs: 10_000, idleMs: 60_000 });
  assert.equal(d.target(0), 2);
  d.record(1000, 5);
  assert.equal(d.target(1500), 5);
  d.record(5000, 100);
  assert.equal(d.target(6000), 64, 'clamped to the maximum');
  assert.equal(new PoolDemand({ min: 3, max: 1 }).max, 3, 'a maximum below the minimum is the minimum');
});

test('the peak is the most demand in any burst window, not the total', () => {
  const d = new PoolDemand({ min: 0, max: 1000, burstMs: 10_000, idleMs: 600_000 });
  // 10 a second for 30 s: any 10 s window holds 100.
  for (let t = 0; t < 30_000; t += 1000) d.record(t, 10);
  assert.equal(d.peak(30_000), 100);
  // A burst straddling a window edge counts whole.
  const e = new PoolDemand({ min: 0, max: 1000, burstMs: 10_000, idleMs: 600_000 });
  e.record(9_500, 32);
  e.record(10_200, 32);
  assert.equal(e.target(11_000), 64);
});

test('demand is forgotten after the idle time: the pool falls back to its minimum', () => {
  const d = new PoolDemand({ min: 1, max: 64, burstMs: 10_000, idleMs: 60_000 });
  d.record(0, 40);
  assert.equal(d.target(59_000), 40, 'a quiet minute does not shrink a pool sized for a burst');
  assert.equal(d.active(59_000), true);
  assert.equal(d.target(61_000), 1);
  assert.equal(d.active(61_000), false);
});

test('shrink and refill steps', () => {
  assert.equal(shrinkStep(2, 4), 0);
  assert.equal(shrinkStep(5, 4), 1);
  assert.equal(shrinkStep(40, 0), 10, 'a quarter of the surplus at a time');
  assert.equal(refillStep(0, 0, 10, 4), 4, 'within the parallel refills');
  assert.equal(refillStep(8, 1, 10, 4), 1, 'what is missing, minus what is under way');
  assert.equal(refillStep(10, 0, 4, 4), 0);
});

test('the create gate bounds creates and serves live work before refills', async () => {
  const gate = new CreateGate(2);
  const order: string[] = [];
  const release: Array<() => void> = [];
  const job = (name: string) => () =>
    new Promise<void>((resolve) => {
      order.push(name);
      release.push(resolve);
    });
  const runs = [gate.run('live', job('l1')), gate.run('background', job('b1'))];
  // Both slots busy: a refill queued first still waits for the live create queued after it.
  runs.push(gate.run('background', job('b2')), gate.run('live', job('l2')));
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(order, ['l1', 'b1']);
  assert.deepEqual(gate.stats, { running: 2, live: 1, background: 1 });
  release.shift()!();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(order, ['l1', 'b1', 'l2']);
  release.shift()!();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(order, ['l1', 'b1', 'l2', 'b2']);
  for (const r of release.splice(0)) r();
  await Promise.all(runs);
  assert.deepEqual(gate.stats, { running: 0, live: 0, background: 0 });
});

test('refills take at most their share of the gate', async () => {
  const gate = new CreateGate(4, 1);
  let running = 0;
  let most = 0;
  const work = async (): Promise<void> => {
    running++;
    most = Math.max(most, running);
    await new Promise((r) => setTimeout(r, 5));
    running--;
  };
  await Promise.all(Array.from({ length: 6 }, () => gate.run('background', work)));
  assert.equal(most, 1);
});

test('a warm pool fills to its minimum, grows with demand, shrinks back when the burst is forgotten', async () => {
  const { WarmPool } = await import('../../src/backends/docker/container/warm-pool.ts');
  let clock = 0;
  let made = 0;
  const removed: string[] = [];
  const log = { info() {}, warn() {}, error() {}, debug() {} };
  const pool = new WarmPool({
    sizing: { min: 1, max: 8, burstMs: 10_000, idleMs: 60_000 },
    create: async () => {
      await new Promise((r) => setTimeout(r, 5));
      return { containerId: `c${++made}`, shellPath: '/bin/sh', baseEnv: {} };
    },
    remove: async (id) => {
      removed.push(id);
    },
    gate: new CreateGate(4),
    log,
    now: () => clock,
  });
  try {
    pool.refill();
    assert.equal(await pool.whenFull(2000), true);
    assert.equal(pool.readyCount, 1);
    // Five sessions asked for: one is served, the pool aims at five and fills in the background.
    pool.noteDemand(5);
    assert.ok(pool.take());
    assert.equal(pool.target, 5);
    assert.equal(await pool.whenFull(2000), true);
    assert.equal(pool.readyCount, 5);
    assert.ok(pool.creating <= 4, 'at most its parallel refills at once');
    // A burst past the maximum is clamped.
    pool.noteDemand(50);
    assert.equal(pool.target, 8);
    assert.equal(await pool.whenFull(2000), true);
    // The idle time passes: each tick removes a quarter of the surplus, oldest first, down to the minimum.
    clock += 61_000;
    assert.equal(pool.target, 1);
    const deadline = Date.now() + 10_000;
    while (pool.readyCount > 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    assert.equal(pool.readyCount, 1);
    assert.equal(removed.length, 7);
    assert.equal(removed[0], 'c2', 'the oldest ready container goes first');
  } finally {
    await pool.close();
  }
  assert.equal(pool.readyCount, 0);
  assert.equal(removed.length, 8, 'closing removes what was ready');
});
