/**
 * Tenant quotas across a fleet (docker/container/quota-slots.ts): slots are containers whose
 * names the engine keeps unique. Against the real engine: six replicas' slot keepers racing for
 * a quota of 2 get exactly 2, a released slot is taken again, a slot whose session is gone is
 * given back. Then two server processes with one instance id and `--fleet`, quota 2: three
 * creates on each at the same moment make exactly two sessions, listed by both replicas; a
 * delete through the other replica frees a slot for the next create.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { type TestContext, test } from 'node:test';
import Docker from 'dockerode';
import { QuotaSlots } from '../../src/backends/docker/container/quota-slots.ts';
import { SLOT_LABEL, STALE_SLOT_MS } from '../../src/backends/docker/container/quota-plan.ts';
import { sleep } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';
import { Fleet, type Replica } from './fleet-replicas.ts';
import { removeInstanceContainers } from './helpers.ts';

const docker = new Docker(process.env.DOCKER_HOST ? undefined : { socketPath: '/var/run/docker.sock' });
const options = { ...dockerTestOptions, timeout: dockerTestOptions.skip ? 1000 : 180_000 };

const slotCount = async (instanceId: string): Promise<number> =>
  (await docker.listContainers({ all: true, filters: { label: [`${SLOT_LABEL.instance}=${instanceId}`] } })).length;

test(
  'quota slots in the engine: racing keepers get exactly the limit, released and stale slots are taken again',
  options,
  async (t) => {
    const instanceId = `quota-${randomUUID().slice(0, 8)}`;
    t.after(() => removeInstanceContainers(instanceId));
    // One keeper per "replica", each with its own engine client: nothing shared but the engine.
    const keepers = Array.from(
      { length: 6 },
      () =>
        new QuotaSlots({
          instanceId,
          slots: new Docker(docker.modem),
          engines: [docker],
          image: TEST_IMAGE,
          timeoutMs: 10_000,
        }),
    );
    const results = await Promise.allSettled(keepers.map((k, i) => k.take('team', `session-${i}`, 2)));
    const won = results.flatMap((r, i) => (r.status === 'fulfilled' ? [i] : []));
    assert.equal(won.length, 2, 'exactly two slots for a quota of 2');
    for (const r of results)
      if (r.status === 'rejected') assert.equal((r.reason as { code?: string }).code, 'EXEC_ERR_SESSION_LIMIT');
    assert.equal(await slotCount(instanceId), 2);
    const slot = await docker.listContainers({
      all: true,
      filters: { label: [`${SLOT_LABEL.instance}=${instanceId}`] },
    });
    assert.ok(
      slot.every((c) => c.State === 'created'),
      'slots are created, never started',
    );

    // A released slot is free again, for another tenant's keeper too (quotas are per tenant).
    await keepers[0]!.release(`session-${won[0]}`);
    await keepers[1]!.take('team', 'session-next', 2);
    await keepers[2]!.take('other-team', 'session-other', 2);
    await assert.rejects(keepers[3]!.take('team', 'session-over', 2), /quota reached: 2 of 2/);

    // None of these sessions has a container: once past the margin their slots are stale.
    await sleep(STALE_SLOT_MS + 1000);
    await keepers[4]!.take('team', 'session-after-stale', 2);
    // The team's two stale slots went and one was taken; the other tenant's stays (only its own creates look).
    assert.equal(await slotCount(instanceId), 2);
  },
);

/** Replicas `a` and `b` of `instanceId`; killed, and the instance's containers removed, when the test ends. */
async function twoReplicas(t: TestContext, instanceId: string): Promise<[Replica, Replica]> {
  const fleet = new Fleet({
    instanceId,
    // No warm pool: the sessions are counted by their session-id label, which a pool container lacks.
    flags: () => ['--max-sessions-per-tenant', '2', '--warm-pool', '0'],
    logLevel: 'warn',
    stderr: 'inherit',
  });
  return fleet.begin(t, 'a', 'b');
}

test('two replicas, quota 2, three creates on each at once: two sessions, no overshoot', options, async (t) => {
  const instanceId = `quota-fleet-${randomUUID().slice(0, 8)}`;
  const [a, b] = await twoReplicas(t, instanceId);
  const create = (r: Replica) =>
    fetch(`${r.http}/v1/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    }).then(async (res) => ({ status: res.status, body: (await res.json()) as Record<string, unknown> }));
  const results = await Promise.all([a, b, a, b, a, b].map(create));
  const made = results.filter((r) => r.status === 201);
  assert.equal(made.length, 2, `two sessions made: ${JSON.stringify(results.map((r) => r.status))}`);
  for (const r of results.filter((x) => x.status !== 201)) {
    assert.equal(r.status, 429);
    assert.equal(r.body['code'], 'EXEC_ERR_SESSION_LIMIT');
  }
  const listed = async (r: Replica) =>
    ((await (await fetch(`${r.http}/v1/sessions`)).json()) as { sessions: Array<{ sessionId: string }> }).sessions
      .map((s) => s.sessionId)
      .sort();
  const ids = made.map((r) => String(r.body['sessionId'])).sort();
  assert.deepEqual(await listed(a), ids, 'A lists the fleet: the two sessions');
  assert.deepEqual(await listed(b), ids, 'B lists the same two');
  assert.equal(await slotCount(instanceId), 2, 'a slot per live session');

  // A delete (through either replica) gives the slot back.
  const del = await fetch(`${b.http}/v1/sessions/${ids[0]}`, { method: 'DELETE' });
  assert.equal(del.status, 204);
  assert.equal(await slotCount(instanceId), 1);
  const again = await create(a);
  assert.equal(again.status, 201, 'the freed slot is taken by the next create');
  assert.equal((await create(b)).status, 429, 'and the quota holds again');
});

test(
  'the idle timeout holds for a session whose replica stopped: another one takes it over and reaps it once',
  options,
  async (t) => {
    const instanceId = `idle-fleet-${randomUUID().slice(0, 8)}`;
    const [a, b] = await twoReplicas(t, instanceId);
    const res = await fetch(`${a.http}/v1/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ idleTimeoutSeconds: 2 }),
    });
    assert.equal(res.status, 201);
    const id = String(((await res.json()) as { sessionId: string }).sessionId);
    const containers = async () =>
      (await docker.listContainers({ all: true, filters: { label: [`exec-server.session-id=${id}`] } })).length;
    assert.equal(await containers(), 1);
    // A stops (SIGTERM in a fleet keeps its sessions); nobody calls the session again.
    const gone = new Promise((r) => a.child.once('exit', r));
    a.child.kill('SIGTERM');
    await gone;
    assert.equal(await containers(), 1, 'the session outlived its replica');
    // B's scan (every 30-35 s) takes the orphan over, its reaper ends it once idle: container and slot go.
    const deadline = Date.now() + 90_000;
    // The slot goes right after the container: both are waited for.
    while ((await containers()) + (await slotCount(instanceId)) > 0 && Date.now() < deadline) await sleep(500);
    assert.equal(await containers(), 0, 'reaped by the replica that took it over');
    assert.equal(await slotCount(instanceId), 0, 'its quota slot given back');
    assert.equal(b.child.exitCode, null);
  },
);
