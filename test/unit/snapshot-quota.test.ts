/**
 * The snapshot quota: `--max-snapshots-per-tenant` parsed and bounded at start, its error in the
 * registry, and the count (src/backends/docker/checkpoints/snapshot-quota.ts): the engine's
 * snapshots plus those under way, each once, per tenant. The engine itself is
 * test/docker/snapshot-quota.test.ts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createSnapshotQuota } from '../../src/backends/docker/checkpoints/snapshot-quota.ts';
import { resolveOptions } from '../../src/backends/docker/options.ts';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { ERROR_REGISTRY, ExecServerError, RETRYABLE_CODES } from '../../src/errors.ts';
import { asTenantId, type TenantId } from '../../src/ids.ts';

const A = asTenantId('a');
const B = asTenantId('b');

test('--max-snapshots-per-tenant: 100 by default, flag or variable, at least 1', () => {
  assert.equal(loadConfig([], {}).maxSnapshotsPerTenant, 100);
  assert.equal(resolveOptions({ defaultImage: 'img', instanceId: 'i' }).maxSnapshotsPerTenant, 100);
  assert.equal(loadConfig(['--max-snapshots-per-tenant', '7'], {}).maxSnapshotsPerTenant, 7);
  assert.equal(loadConfig([], { EXEC_SERVER_MAX_SNAPSHOTS_PER_TENANT: '9' }).maxSnapshotsPerTenant, 9);
  for (const [value, re] of [
    ['0', /--max-snapshots-per-tenant .*must be at least 1, got 0/],
    ['-1', /must be at least 1, got -1/],
    ['100001', /must be at most 100000/],
    ['many', /--max-snapshots-per-tenant .*expected an integer/],
  ] as const)
    assert.throws(
      () => loadConfig(['--max-snapshots-per-tenant', value], {}),
      (e: Error) => e instanceof ConfigError && re.test(e.message),
      value,
    );
});

test('EXEC_ERR_SNAPSHOT_LIMIT: 429, -32600, not retryable (snapshots stay until deleted)', () => {
  assert.deepEqual(ERROR_REGISTRY.EXEC_ERR_SNAPSHOT_LIMIT, [429, -32600]);
  assert.equal(RETRYABLE_CODES.has('EXEC_ERR_SNAPSHOT_LIMIT'), false);
});

/** An engine as the quota sees it: the ids per tenant; `listing` holds the answer until released. */
class FakeEngine {
  readonly images = new Map<TenantId, string[]>();
  #gate: Promise<void> | undefined;
  #open: (() => void) | undefined;

  hold(): void {
    this.#gate = new Promise((r) => {
      this.#open = r;
    });
  }
  open(): void {
    this.#open?.();
    this.#gate = undefined;
  }
  /** Reads the images when asked (as the engine does), answers once the gate opens. */
  readonly list = async (tenant: TenantId): Promise<readonly string[]> => {
    const now = [...(this.images.get(tenant) ?? [])];
    await this.#gate;
    return now;
  };
  add(tenant: TenantId, id: string): void {
    this.images.set(tenant, [...(this.images.get(tenant) ?? []), id]);
  }
}

async function limitOf(p: Promise<unknown>): Promise<ExecServerError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof ExecServerError, String(err));
    return err;
  }
  throw new Error('no refusal');
}

test('the count is the engine plus those under way; past it EXEC_ERR_SNAPSHOT_LIMIT with count and limit', async () => {
  const engine = new FakeEngine();
  const quota = createSnapshotQuota(2, engine.list);
  engine.add(A, 'sha256:1');
  const held = await quota.reserve(A);
  const err = await limitOf(quota.reserve(A));
  assert.equal(err.code, 'EXEC_ERR_SNAPSHOT_LIMIT');
  assert.equal(err.statusCode, 429);
  assert.match(err.message, /2 of 2 snapshots .*1 of them being taken; delete snapshots to make room/);
  assert.deepEqual(err.detail, { count: 2, limit: 2 });
  // Another tenant counts its own.
  (await quota.reserve(B)).release();
  // Made and listed: counted once, by the engine.
  held.made('sha256:2');
  engine.add(A, 'sha256:2');
  held.release();
  assert.match((await limitOf(quota.reserve(A))).message, /has 2 of 2 snapshots \(--max-snapshots-per-tenant\);/);
  // A failed snapshot gives its place back.
  engine.images.set(A, ['sha256:1']);
  const failed = await quota.reserve(A);
  failed.release();
  failed.release();
  (await quota.reserve(A)).release();
});

test('asked at once, snapshots count each other; one made during the listing counts once', async () => {
  const engine = new FakeEngine();
  const quota = createSnapshotQuota(2, engine.list);
  engine.hold();
  const burst = [quota.reserve(A), quota.reserve(A), quota.reserve(A)];
  engine.open();
  const settled = await Promise.allSettled(burst);
  assert.deepEqual(
    settled.map((r) => r.status),
    ['fulfilled', 'fulfilled', 'rejected'],
  );
  for (const r of settled) if (r.status === 'fulfilled') r.value.release();

  // The first is made while the second's listing is under way, which was read before it
  // existed: it still counts (here with the one the tenant had, the quota is reached).
  engine.add(A, 'sha256:e');
  const first = await quota.reserve(A);
  engine.hold();
  const second = quota.reserve(A);
  first.made('sha256:x');
  engine.add(A, 'sha256:x');
  first.release();
  engine.open();
  assert.match((await limitOf(second)).message, /has 2 of 2 snapshots/);

  // Read after the image exists, while its place is still held: it counts once, by its id.
  engine.images.set(A, []);
  const third = await quota.reserve(A);
  engine.add(A, 'sha256:y');
  engine.hold();
  const fourth = quota.reserve(A);
  third.made('sha256:y');
  engine.open();
  (await fourth).release();
  third.release();
});

test('a snapshot the quota refused does not count for those asked with it', async () => {
  const engine = new FakeEngine();
  const quota = createSnapshotQuota(1, engine.list);
  engine.add(A, 'sha256:old');
  engine.hold();
  const refused = quota.reserve(A);
  const next = quota.reserve(A);
  engine.open();
  await limitOf(refused);
  // The engine had the tenant's one snapshot: refused too, counting 1 (not the refused one).
  assert.match((await limitOf(next)).message, /has 1 of 1 snapshots/);
  engine.images.set(A, []);
  (await quota.reserve(A)).release();
});
