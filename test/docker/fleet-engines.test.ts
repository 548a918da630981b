/**
 * A fleet over a pool of two engines (docs/architecture.md, "Fleet"): two server processes with
 * one --instance-id and --fleet, each with `--docker-host` naming both engines (the second one
 * from test/support/second-engine.ts: its own data root, exec root, socket and bridge). Sessions
 * spread over both engines; a session made on one replica is used through the other, on each
 * engine; the second engine stopped (its containers live on, `--live-restore`): the first
 * engine's sessions go on, new sessions work, calls that need the stopped engine fail within
 * seconds with EXEC_ERR_BACKEND_UNAVAILABLE through either replica; started again: its sessions
 * work again through both.
 *
 * The second engine is shared with engine-pool.test.ts; scripts/test.sh runs the files that use
 * an engine one at a time, and each leaves it stopped.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import type { DevServer } from '../support/dev-server.ts';
import { sleep } from '../support/harness.ts';
import { docker2, SECOND_ENGINE_HOST, startSecondEngine } from '../support/second-engine.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';
import { Fleet } from './fleet-replicas.ts';
import { createSession } from '../http/helpers.ts';
import { docker } from './helpers.ts';

const instanceId = `fleet-engines-${randomUUID().slice(0, 8)}`;
const ENGINES = `unix:///var/run/docker.sock,${SECOND_ENGINE_HOST}`;

async function create(r: DevServer): Promise<string> {
  return (await createSession(r, { sandbox: { type: 'danger-full-access' } })).sessionId;
}

/** The engine that holds the session's container. */
async function engineOf(id: string): Promise<'first' | 'second'> {
  const filter = ['ps', '-a', '--filter', `label=exec-server.instance=${instanceId}`];
  const named = async (run: (...a: string[]) => Promise<string>) =>
    (await run(...filter, '--format', '{{.Names}} {{.Label "exec-server.session-id"}}')).includes(id);
  if (await named(docker)) return 'first';
  assert.ok(await named(docker2), `session ${id} has a container on one of the engines`);
  return 'second';
}

interface Answer {
  status: number;
  body: { exit_code?: number; output?: string; code?: string; message?: string };
  ms: number;
}

async function exec(r: DevServer, id: string, cmd: string): Promise<Answer> {
  const t0 = Date.now();
  const res = await fetch(`${r.http}/v1/sessions/${id}/exec_command`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ cmd, login: false }),
  });
  return { status: res.status, body: (await res.json()) as Answer['body'], ms: Date.now() - t0 };
}

async function snapshot(r: DevServer, id: string): Promise<Answer> {
  const t0 = Date.now();
  const res = await fetch(`${r.http}/v1/sessions/${id}/snapshots`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  return { status: res.status, body: (await res.json()) as Answer['body'], ms: Date.now() - t0 };
}

async function works(r: DevServer, id: string, text: string): Promise<void> {
  const a = await exec(r, id, `echo ${text}`);
  assert.equal(a.status, 200, JSON.stringify(a.body));
  assert.equal(a.body.exit_code, 0);
  assert.match(a.body.output ?? '', new RegExp(`^${text}$`, 'm'));
}

async function removeInstance(): Promise<void> {
  for (const run of [docker, docker2]) {
    for (const label of [
      `exec-server.instance=${instanceId}`,
      `exec-server.claim-instance=${instanceId}`,
      // Quota slots (container/quota-slots.ts) carry an instance label of their own.
      `exec-server.quota-instance=${instanceId}`,
    ]) {
      const ids = (await run('ps', '-aq', '--filter', `label=${label}`).catch(() => '')).split('\n').filter(Boolean);
      if (ids.length > 0) await run('rm', '-f', ...ids).catch(() => undefined);
    }
  }
}

test('a fleet over two engines: spread, used through either replica, one engine lost and back', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 150_000,
}, async (t) => {
  const engine2 = await startSecondEngine(TEST_IMAGE);
  const fleet = new Fleet({
    instanceId,
    flags: () => ['--docker-host', ENGINES, '--warm-pool', '0'],
    // The second engine runs while its containers are removed, then is left stopped (as every file using it leaves it).
    removeContainers: async () => {
      await engine2.start();
      await removeInstance();
      await engine2.stop();
    },
  });
  const [a, b] = await fleet.begin(t, 'a', 'b');

  // Each replica places a new session on the engine with the fewest of its sessions.
  const made = [await create(a), await create(a), await create(b), await create(b)];
  const places = await Promise.all(made.map(engineOf));
  assert.deepEqual(places.filter((p) => p === 'second').length, 2, `two on each engine: ${places.join(', ')}`);
  const aFirst = made[places.indexOf('first')] as string;
  const aSecond = made[places.indexOf('second')] as string;
  const bSecond = made[places.lastIndexOf('second')] as string;

  await t.test("A's sessions are used through B, on each engine", async () => {
    await works(b, aFirst, 'first-via-b');
    await works(b, aSecond, 'second-via-b');
    await works(a, bSecond, 'b-second-via-a');
    const listed = (await (await fetch(`${b.http}/v1/sessions`)).json()) as { sessions: { sessionId: string }[] };
    assert.deepEqual(listed.sessions.map((s) => s.sessionId).sort(), [...made].sort(), 'B lists all four');
  });

  await t.test('the second engine stopped: the first goes on, clear errors for the lost one', async () => {
    await engine2.stop();
    await works(a, aFirst, 'first-still');
    await works(b, aFirst, 'first-still-via-b');
    const started = Date.now();
    const fresh = [await create(a), await create(b)];
    assert.ok(Date.now() - started < 20_000, `two creates while an engine is down took ${Date.now() - started} ms`);
    for (const id of fresh) assert.equal(await engineOf(id), 'first', 'new sessions go to the engine that answers');
    await works(b, fresh[0] as string, 'fresh-via-b');
    // A call that needs the stopped engine, through the owner and through the other replica.
    for (const [r, id] of [
      [a, aSecond],
      [b, aSecond],
      [a, bSecond],
    ] as const) {
      const answer = await snapshot(r, id);
      assert.equal(answer.status, 503, JSON.stringify(answer.body));
      assert.equal(answer.body.code, 'EXEC_ERR_BACKEND_UNAVAILABLE');
      assert.match(answer.body.message ?? '', /exec-server-engine2/, 'the error names the engine');
      assert.ok(answer.ms < 12_000, `the failure took ${answer.ms} ms`);
    }
    // Listed through either replica, the lost engine's sessions too: their owners still hold them.
    for (const r of [a, b]) {
      const started = Date.now();
      const listed = (await (await fetch(`${r.http}/v1/sessions`)).json()) as { sessions: { sessionId: string }[] };
      const ids = listed.sessions.map((s) => s.sessionId).sort();
      assert.deepEqual(ids, [...made, ...fresh].sort(), `${r.http} lists all six, once each`);
      assert.ok(Date.now() - started < 12_000, `the list took ${Date.now() - started} ms`);
    }
  });

  await t.test('the second engine back: its sessions work again through either replica', async () => {
    await engine2.start();
    const deadline = Date.now() + 30_000;
    for (;;) {
      const answer = await exec(b, aSecond, 'echo back');
      if (answer.status === 200 || Date.now() > deadline) break;
      await sleep(500);
    }
    await works(b, aSecond, 'back-via-b');
    await works(a, aSecond, 'back-via-a');
    await works(a, bSecond, 'b-back-via-a');
    await works(b, aFirst, 'first-after');
    // A kept its lease on the first engine all along: nothing of its moved to B.
    assert.doesNotMatch(b.stderr(), /took over/);
    assert.doesNotMatch(a.stderr(), /took over/);
  });
});
