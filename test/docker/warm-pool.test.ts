/**
 * The self-sizing warm pool against a real engine (container/warm-pool.ts, pool-sizing.ts):
 * demand grows it, idleness shrinks it back to its minimum; and a batch create of docker
 * sessions (`POST /v1/sessions?count=4`) answers four containers, or none when one create fails.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { Backend } from '../../src/backends/types.ts';
import type { DockerBackend } from '../../src/backends/docker/index.ts';
import type { SessionInfo } from '../../src/protocol/index.ts';
import { requestJson } from '../http/helpers.ts';
import { startServer } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';
import { docker, makeBackend, poolContainerIds, RecordingSink, sessionSpec, sleep, spawnRequest } from './helpers.ts';

const closers: Array<() => Promise<void>> = [];
after(async () => {
  for (const c of closers) await c().catch(() => undefined);
});

async function until(what: string, ms: number, ok: () => Promise<boolean> | boolean): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

test('the pool grows to the demand it saw, then shrinks back to its minimum', dockerTestOptions, async () => {
  const backend = makeBackend({ warmPoolSize: 1, warmPoolMax: 6, warmPoolIdleMs: 8000 });
  closers.push(() => backend.close());
  assert.equal(await backend.poolFull(60_000), true);
  assert.deepEqual(backend.poolState(), { ready: 1, target: 1, creating: 0 });
  assert.deepEqual(backend.warmPools(), [{ pool: 'runc', ready: 1, target: 1 }], 'as /metrics reports it');

  // A burst of 4 default sessions: one from the pool, three cold; the pool now aims at 4.
  const sessions = await Promise.all([1, 2, 3, 4].map(() => backend.createSession(sessionSpec())));
  assert.equal(backend.poolState().target, 4);
  await until('the pool to hold 4', 90_000, () => backend.poolState().ready === 4);
  const unclaimedIds = async (): Promise<string[]> =>
    (await poolContainerIds(backend)).filter((id) => !sessions.some((s) => s.containerId === id));
  const unclaimed = async (): Promise<number> => (await unclaimedIds()).length;
  const waiting = await unclaimedIds();
  assert.equal(waiting.length, 4, 'four unclaimed pool containers');
  // Taken from the grown pool, not created cold (which a time limit would stand for, and flake).
  const pooled = await backend.createSession(sessionSpec());
  const taken = pooled.containerId;
  assert.ok(taken !== undefined && waiting.includes(taken), 'a session of the grown pool is one of its containers');
  sessions.push(pooled);

  // Quiet for the idle time: the target falls back to 1 and the surplus is removed.
  await until('the pool to shrink to 1', 40_000, () => backend.poolState().ready === 1);
  assert.equal(backend.poolState().target, 1);
  await until('surplus containers removed', 20_000, async () => (await unclaimed()) === 1);
  await Promise.all(sessions.map((s) => s.destroy()));
});

/** Containers of the server's sessions (not its pool). */
async function sessionContainers(backend: DockerBackend): Promise<string[]> {
  const out = await docker(
    'ps',
    '-aq',
    '--filter',
    `label=exec-server.instance=${backend.options.instanceId}`,
    '--filter',
    'label=exec-server.pool=false',
  );
  return out.split('\n').filter((l) => l !== '');
}

test('batch create of docker sessions: four at once, and none left when one fails', dockerTestOptions, async () => {
  const server = await startServer({ backend: 'docker' });
  closers.push(() => server.close());
  const backend = server.backend as DockerBackend;
  const made = await requestJson<{ sessions: SessionInfo[] }>(`${server.httpUrl}/v1/sessions?count=4`, 'POST', {});
  assert.equal(made.status, 201, JSON.stringify(made.body));
  assert.equal(made.body.sessions.length, 4);
  assert.equal((await sessionContainers(backend)).length, 4);
  for (const s of made.body.sessions) {
    const r = await requestJson<{ exit_code?: number; output?: string }>(
      `${server.httpUrl}/v1/sessions/${s.sessionId}/exec_command`,
      'POST',
      { cmd: 'echo ok' },
    );
    assert.match(r.body.output ?? '', /ok/);
    assert.equal((await requestJson(`${server.httpUrl}/v1/sessions/${s.sessionId}`, 'DELETE')).status, 204);
  }
  assert.equal((await sessionContainers(backend)).length, 0);

  // The third create of the next batch fails after the others made their containers.
  const real = backend.createSession.bind(backend);
  let n = 0;
  (backend as Backend).createSession = async (spec) => {
    if (++n === 3) {
      await sleep(300);
      throw new Error('injected engine failure');
    }
    return real(spec);
  };
  const failed = await requestJson(`${server.httpUrl}/v1/sessions?count=4`, 'POST', {});
  assert.equal(failed.status, 500);
  assert.match(JSON.stringify(failed.body), /1 of 4 sessions could not be made \(the 3 made were removed\)/);
  assert.deepEqual(await sessionContainers(backend), []);
  const listed = await requestJson<{ sessions: SessionInfo[] }>(`${server.httpUrl}/v1/sessions`, 'GET');
  assert.deepEqual(listed.body.sessions, []);
});

test('the agent volume every container shares is read-only inside them, even for root', dockerTestOptions, async () => {
  const backend = makeBackend();
  closers.push(() => backend.close());
  const s = await backend.createSession(sessionSpec());
  const sink = new RecordingSink();
  await s.spawn(
    spawnRequest([
      'sh',
      '-c',
      'id -u; (: > /.exec-server/exec-agent); mount -o remount,rw /.exec-server 2>&1; grep " /.exec-server " /proc/mounts 2>&1; echo end',
    ]),
    sink,
  );
  await sink.exited;
  const out = sink.text();
  assert.match(out, /^0\n/, 'root in the container');
  assert.match(out, /Read-only file system/);
  assert.match(out, / \/\.exec-server \S+ ro[, ]/, out);
  assert.match(out, /end\n$/, out);
  await s.destroy();
});
