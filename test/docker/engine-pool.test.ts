/**
 * A pool of two Docker engines behind one backend (`--docker-host a,b`, engine-pool.ts): new
 * sessions spread over both; the second engine stopped (its containers live on, `--live-restore`):
 * new sessions go to the first at once, calls that need the stopped engine fail within seconds
 * with EXEC_ERR_BACKEND_UNAVAILABLE, `/readyz`'s engine list says which; started again: its
 * sessions are served again.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { createDockerEngines } from '../../src/backends/docker/index.ts';
import type { Backend, BackendSession } from '../../src/backends/types.ts';
import { docker2, SECOND_ENGINE_HOST, startSecondEngine } from '../support/second-engine.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';
import { docker, RecordingSink, sessionSpec, sleep, spawnRequest } from './helpers.ts';

const silent = { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} };

async function on(session: BackendSession): Promise<'first' | 'second'> {
  const first = (await docker('ps', '-q', '--no-trunc', '--filter', `id=${session.containerId!}`)).trim();
  if (first !== '') return 'first';
  const second = (await docker2('ps', '-q', '--no-trunc', '--filter', `id=${session.containerId!}`)).trim();
  assert.notEqual(second, '', 'the container is on one of the engines');
  return 'second';
}

async function echo(session: BackendSession, text: string): Promise<string> {
  const sink = new RecordingSink();
  await session.spawn(spawnRequest(['echo', text]), sink);
  assert.deepEqual(await sink.exited, { kind: 'exited', code: 0 });
  return sink.text('stdout');
}

test('two engines: sessions spread; one stops: new sessions elsewhere, clear errors; back: served again', {
  ...dockerTestOptions,
  timeout: 300_000,
}, async (t) => {
  const engine2 = await startSecondEngine(TEST_IMAGE);
  t.after(() => engine2.stop());
  const pool: Backend = createDockerEngines(
    ['unix:///var/run/docker.sock', SECOND_ENGINE_HOST],
    { defaultImage: TEST_IMAGE, instanceId: `pool-${randomUUID().slice(0, 8)}`, engineTimeoutMs: 3000 },
    silent,
  );
  t.after(() => pool.close());
  assert.deepEqual(await pool.recover(), []);

  const sessions: BackendSession[] = [];
  for (let i = 0; i < 4; i++) sessions.push(await pool.createSession(sessionSpec()));
  const places = await Promise.all(sessions.map(on));
  assert.deepEqual(
    places.filter((p) => p === 'first').length,
    2,
    `fewest sessions first: two on each engine (${places.join(', ')})`,
  );
  assert.deepEqual(
    pool.engines?.().map((e) => [e.healthy, e.sessions]),
    [
      [true, 2],
      [true, 2],
    ],
  );
  const onSecond = sessions[places.indexOf('second')] as BackendSession;
  assert.equal(await echo(onSecond, 'before'), 'before\n');

  await engine2.stop();
  // New sessions go to the first engine, without waiting on the stopped one.
  const started = Date.now();
  for (let i = 0; i < 2; i++) assert.equal(await on(await pool.createSession(sessionSpec())), 'first');
  assert.ok(Date.now() - started < 15_000, `new sessions while one engine is down took ${Date.now() - started} ms`);
  // What needs the stopped engine fails within its deadline, with the code that says so.
  const t0 = Date.now();
  await assert.rejects(onSecond.snapshot(undefined), { code: 'EXEC_ERR_BACKEND_UNAVAILABLE' });
  assert.ok(Date.now() - t0 < 10_000, `the failure took ${Date.now() - t0} ms`);
  await sleep(2500); // a health round
  const report = pool.engines?.() ?? [];
  assert.equal(report[0]?.healthy, true);
  assert.equal(report[1]?.healthy, false);
  assert.match(report[1]?.reason ?? '', /docker engine|unavailable|ENOENT|ECONNREFUSED/);
  await pool.ping(); // the pool answers while one engine does

  await engine2.start();
  for (let i = 0; i < 40 && pool.engines?.()[1]?.healthy !== true; i++) await sleep(500);
  assert.equal(pool.engines?.()[1]?.healthy, true, 'the engine is healthy again');
  assert.equal(await echo(onSecond, 'after'), 'after\n', 'its session is served again');
  const snap = await onSecond.snapshot(undefined);
  assert.ok(snap.snapshotId.length > 0);
  await pool.deleteSnapshot(snap.snapshotId, undefined);
});
