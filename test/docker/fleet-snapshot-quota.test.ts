/**
 * `--max-snapshots-per-tenant` across a fleet (checkpoints/snapshot-quota.ts, markers in
 * snapshot-markers.ts): two replicas of one instance id, in one process, nothing shared but the
 * engine. With room for exactly one more snapshot, both snapshot at the same moment, several
 * times: never more than the quota exist afterwards. A marker of a snapshot under way elsewhere
 * counts; a stale one (a replica that died mid-snapshot) does not, and is removed; a replica that
 * starts adopts no marker.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import Docker from 'dockerode';
import type { DockerBackend } from '../../src/backends/docker/index.ts';
import {
  MARKER_LABEL,
  markerPrefix,
  STALE_MARKER_MS,
} from '../../src/backends/docker/checkpoints/snapshot-marker-plan.ts';
import type { BackendSession } from '../../src/backends/types.ts';
import { asTenantId } from '../../src/ids.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';
import { docker, makeBackend, removeInstanceContainers, sessionSpec } from './helpers.ts';

const engine = new Docker(process.env.DOCKER_HOST ? undefined : { socketPath: '/var/run/docker.sock' });
const MAX = 2;
const ROUNDS = 4;

const markers = async (instanceId: string) =>
  engine.listContainers({ all: true, filters: { label: [`${MARKER_LABEL.instance}=${instanceId}`] } });

/** Polls (bounded) until no marker of `instanceId` is left: a finished snapshot removes its own just after. */
async function noMarkersLeft(instanceId: string): Promise<void> {
  const until = Date.now() + 10_000;
  while ((await markers(instanceId)).length > 0) {
    assert.ok(Date.now() < until, 'markers left 10 s after their snapshots finished');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A marker as another replica would make it, `ageMs` old. */
async function handMarker(instanceId: string, tenant: string, ageMs: number): Promise<string> {
  const c = await engine.createContainer({
    name: `${markerPrefix(instanceId, tenant)}hand${randomUUID().slice(0, 8)}`,
    Image: TEST_IMAGE,
    Cmd: ['true'],
    Labels: {
      [MARKER_LABEL.instance]: instanceId,
      [MARKER_LABEL.tenant]: tenant,
      [MARKER_LABEL.created]: String(Date.now() - ageMs),
    },
  });
  return c.id;
}

const refusedForQuota = (r: PromiseSettledResult<unknown>): boolean =>
  r.status === 'rejected' && (r.reason as { code?: string }).code === 'EXEC_ERR_SNAPSHOT_LIMIT';

test('two replicas snapshotting at once never pass the tenant quota; stale markers do not count', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 300_000,
}, async (t) => {
  const instanceId = `snapq-${randomUUID().slice(0, 8)}`;
  const tenant = asTenantId(`snapq-${randomUUID().slice(0, 8)}`);
  const backends: DockerBackend[] = [];
  const sessions: BackendSession[] = [];
  const replica = (replicaId: string): DockerBackend => {
    const b = makeBackend({
      instanceId,
      warmPoolSize: 0,
      maxSnapshotsPerTenant: MAX,
      fleet: { replicaId, advertiseUrl: `http://127.0.0.1:1/${replicaId}` },
    });
    backends.push(b);
    return b;
  };
  t.after(async () => {
    for (const s of sessions) await s.destroy().catch(() => undefined);
    for (const b of backends) await b.close().catch(() => undefined);
    const ids = (await docker('images', '-q', '--filter', `label=exec-server.tenant=${tenant}`)).split('\n');
    for (const id of new Set(ids.filter(Boolean))) await docker('rmi', '-f', id).catch(() => undefined);
    for (const m of await markers(instanceId)) await engine.getContainer(m.Id).remove({ force: true });
    await removeInstanceContainers(instanceId);
  });
  const a = replica('a');
  const b = replica('b');
  await a.recover();
  await b.recover();
  const sa = await a.createSession(sessionSpec({ tenant }));
  sessions.push(sa);
  const sb = await b.createSession(sessionSpec({ tenant }));
  sessions.push(sb);
  const count = async () => (await a.listSnapshots(tenant)).length;

  // One snapshot exists: exactly one more fits.
  await sa.snapshot('base');
  let admitted = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const results = await Promise.allSettled([sa.snapshot(`a-${round}`), sb.snapshot(`b-${round}`)]);
    const made = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value.snapshotId] : []));
    assert.ok(
      results.every((r) => r.status === 'fulfilled' || refusedForQuota(r)),
      `round ${round}: ${JSON.stringify(results)}`,
    );
    assert.ok((await count()) <= MAX, `round ${round}: ${await count()} snapshots for a quota of ${MAX}`);
    assert.ok(made.length <= 1, `round ${round}: both replicas were admitted at the edge`);
    admitted += made.length;
    for (const id of made) await a.deleteSnapshot(id, tenant);
    await noMarkersLeft(instanceId);
  }
  // Refused at once, both try again at random delays: apart, one of them fits.
  assert.ok(admitted > 0, `none of ${ROUNDS} rounds admitted one of the two`);
  t.diagnostic(`one of the two admitted in ${admitted} of ${ROUNDS} rounds`);

  // A snapshot under way on another replica (its marker, fresh) takes the last place.
  const underWay = await handMarker(instanceId, tenant, 0);
  await assert.rejects(sa.snapshot('while-other'), (err: Error & { code?: string }) => {
    assert.equal(err.code, 'EXEC_ERR_SNAPSHOT_LIMIT');
    assert.match(err.message, /2 of 2 snapshots .*1 of them being taken/);
    return true;
  });
  // A replica that starts now adopts nothing of it (markers carry no exec-server.instance label).
  const c = replica('c');
  assert.deepEqual(await c.recover(), []);
  await engine.getContainer(underWay).remove({ force: true });

  // A replica that died mid-snapshot left a marker older than any snapshot takes: not counted, removed by id.
  const stale = await handMarker(instanceId, tenant, STALE_MARKER_MS + 60_000);
  const last = await sb.snapshot('past-stale');
  assert.equal(await count(), MAX);
  assert.ok(!(await markers(instanceId)).some((m) => m.Id === stale), 'the stale marker was removed');
  await assert.rejects(sa.snapshot('over'), { code: 'EXEC_ERR_SNAPSHOT_LIMIT' });
  await a.deleteSnapshot(last.snapshotId, tenant);
  await noMarkersLeft(instanceId);
});
