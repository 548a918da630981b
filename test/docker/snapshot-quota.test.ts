/**
 * `--max-snapshots-per-tenant` against a real engine, through the server's own wiring from its
 * configuration to the backend: with a quota of 2 a tenant makes 2 snapshots and the 3rd is 429
 * EXEC_ERR_SNAPSHOT_LIMIT (a fork too, and it makes no session); deleting one makes room; 3
 * snapshots asked at once give exactly 2; another tenant is not affected; a fork of count 2
 * takes one place, and counts.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { buildApp } from '../../src/app.ts';
import { createBackend } from '../../src/backends/create-backend.ts';
import { ExecServerHttpError, HttpApi } from '../../src/client/index.ts';
import { loadConfig } from '../../src/config.ts';
import { silentLogger } from '../../src/logger.ts';
import { dockerExecPath } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';
import { docker } from './helpers.ts';

/** Tenants of this run only: snapshots are counted by their tenant across the whole engine. */
const RUN = randomBytes(4).toString('hex');
const ALICE = `quota-a-${RUN}`;
const BOB = `quota-b-${RUN}`;

async function startQuotaServer(max: number): Promise<{ url: string; close: () => Promise<void> }> {
  const runtime = process.env.EXEC_SERVER_TEST_RUNTIME;
  const config = loadConfig(
    [
      ...['--listen', 'ws://127.0.0.1:0', '--backend', 'docker', '--image', TEST_IMAGE],
      ...['--workspace-root', await mkdtemp(join(tmpdir(), 'exec-server-test-'))],
      ...['--instance-id', `test-quota-${RUN}`, '--warm-pool', '0', '--docker-exec-path', dockerExecPath()],
      ...['--tokens', `${ALICE}:TA,${BOB}:TB`, '--max-snapshots-per-tenant', String(max)],
      ...(runtime === undefined ? [] : ['--runtime', runtime]),
    ],
    {},
  );
  const backend = await createBackend(config, silentLogger);
  const app = await buildApp({ config, backend });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return { url: `http://127.0.0.1:${port}`, close: () => app.close() };
}

async function refused<T>(what: Promise<T>): Promise<ExecServerHttpError> {
  try {
    await what;
  } catch (err) {
    assert.ok(err instanceof ExecServerHttpError, String(err));
    return err;
  }
  throw new Error('the request succeeded');
}

function assertQuota(err: ExecServerHttpError, count: number): void {
  assert.equal(err.status, 429, err.message);
  assert.equal(err.code, 'EXEC_ERR_SNAPSHOT_LIMIT', err.message);
  assert.match(err.message, new RegExp(`${count} of 2 snapshots`));
  assert.match(err.message, /delete snapshots/);
}

test('a tenant makes as many snapshots as its quota, forks included', dockerTestOptions, async (t) => {
  const server = await startQuotaServer(2);
  t.after(() => server.close());
  t.after(async () => {
    const left = await docker('images', '-q', '--filter', `label=exec-server.tenant=${ALICE}`).catch(() => '');
    const more = await docker('images', '-q', '--filter', `label=exec-server.tenant=${BOB}`).catch(() => '');
    for (const id of new Set(`${left}\n${more}`.split('\n').filter((s) => s !== '')))
      await docker('rmi', '-f', id).catch(() => undefined);
  });
  const alice = new HttpApi(server.url, 'TA');
  const bob = new HttpApi(server.url, 'TB');
  const source = await alice.createSession();
  const id = source.sessionId;

  const first = await alice.snapshot(id, 'one');
  const second = await alice.snapshot(id, 'two');
  assertQuota(await refused(alice.snapshot(id, 'three')), 2);
  // A fork takes a snapshot first: refused the same way, before any session is made.
  assertQuota(await refused(alice.fork(id, { count: 2 })), 2);
  assert.deepEqual(
    (await alice.listSessions()).map((s) => s.sessionId),
    [id],
  );
  assert.equal((await alice.listSnapshots()).length, 2);

  // Another tenant has a quota of its own.
  const other = await bob.createSession();
  const bobs = await bob.snapshot(other.sessionId, 'bob');
  assert.deepEqual(
    (await bob.listSnapshots()).map((s) => s.snapshotId),
    [bobs.snapshotId],
  );

  // Deleting one frees its place.
  await alice.deleteSnapshot(first.snapshotId);
  const third = await alice.snapshot(id, 'three');
  assertQuota(await refused(alice.snapshot(id, 'four')), 2);
  await alice.deleteSnapshot(second.snapshotId);
  await alice.deleteSnapshot(third.snapshotId);

  // Asked at once, they count each other: exactly 2 of 3 are made.
  const burst = await Promise.allSettled([1, 2, 3].map((n) => alice.snapshot(id, `burst-${n}`)));
  const made = burst.flatMap((r) => (r.status === 'fulfilled' ? [r.value.snapshotId] : []));
  const failed = burst.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
  assert.equal(made.length, 2, JSON.stringify(burst.map((r) => r.status)));
  assert.equal(failed.length, 1);
  assert.ok(failed[0] instanceof ExecServerHttpError, String(failed[0]));
  assert.equal(failed[0].code, 'EXEC_ERR_SNAPSHOT_LIMIT');
  assert.deepEqual((await alice.listSnapshots()).map((s) => s.snapshotId).sort(), [...made].sort());
  for (const snapshotId of made) await alice.deleteSnapshot(snapshotId);

  // A fork of count 2 takes one place: one more snapshot fits, then the quota is reached.
  const fork = await alice.fork(id, { count: 2 });
  assert.equal(fork.sessions.length, 2);
  assert.equal((await alice.listSnapshots()).length, 1);
  await alice.snapshot(id, 'after-fork');
  assertQuota(await refused(alice.snapshot(id, 'past-fork')), 2);
  assert.equal((await bob.listSnapshots()).length, 1, "alice's snapshots never count for bob");
});
