/**
 * Lifecycle against a real engine: a container killed from outside gives `lost`; an engine
 * that goes away gives quick, clear errors and the backend recovers when it is back; memory
 * stays bounded under a 50 MB burst; the warm pool hands out pre-started containers.
 */
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type Docker from 'dockerode';
import type { DockerBackend } from '../../src/backends/docker/index.ts';
import { asTenantId } from '../../src/ids.ts';
import { dockerTestOptions } from './engine.ts';
import { docker, makeBackend, poolContainerIds, RecordingSink, sessionSpec, sleep, spawnRequest } from './helpers.ts';
import { EngineProxy } from './socket-proxy.ts';

const backends: DockerBackend[] = [];
function track(b: DockerBackend): DockerBackend {
  backends.push(b);
  return b;
}
after(async () => {
  for (const b of backends) await b.close().catch(() => undefined);
});

test('container killed from outside: running processes end lost, onLost fires', dockerTestOptions, async () => {
  const backend = track(makeBackend());
  const session = await backend.createSession(sessionSpec());
  const lost: string[] = [];
  session.onLost((r) => lost.push(r));
  const pty = new RecordingSink();
  const pipe = new RecordingSink();
  await session.spawn(spawnRequest(['sh', '-c', 'echo up; sleep 300'], { mode: 'pty' }), pty);
  await session.spawn(spawnRequest(['sh', '-c', 'echo up; sleep 300'], { mode: 'pipe' }), pipe);
  while (!pty.text().includes('up') || !pipe.text().includes('up')) await sleep(10);
  await docker('kill', session.containerId!);
  const [a, b] = await Promise.all([pty.exited, pipe.exited]);
  assert.equal(a.kind, 'lost');
  assert.equal(b.kind, 'lost');
  const deadline = Date.now() + 5000;
  while (lost.length === 0 && Date.now() < deadline) await sleep(20);
  assert.equal(lost.length, 1);
  assert.match(lost[0]!, /died/);
  await assert.rejects(session.spawn(spawnRequest(['true']), new RecordingSink()), { code: 'EXEC_ERR_SESSION_DEAD' });
  assert.deepEqual([...pty.violations, ...pipe.violations], []);
  await session.destroy();
});

test('container removed from outside while idle: onLost fires', dockerTestOptions, async () => {
  const backend = track(makeBackend());
  const session = await backend.createSession(sessionSpec());
  const lost = new Promise<string>((resolve) => session.onLost(resolve));
  await docker('rm', '-f', session.containerId!);
  assert.match(await lost, /died|removed/);
});

test(
  'a remove the engine finishes after a failed try is the teardown ending, not a loss',
  dockerTestOptions,
  async () => {
    const backend = track(makeBackend());
    const session = await backend.createSession(sessionSpec());
    const lost: string[] = [];
    session.onLost((r) => lost.push(r));
    // As when the engine misses the remove's deadline under load and finishes it a moment later.
    const { container } = (session as unknown as { inner: { container: Docker.Container } }).inner;
    const remove = container.remove.bind(container);
    let late: Promise<unknown> | undefined;
    Object.assign(container, {
      remove: () => {
        late = sleep(200).then(() => remove({ force: true }));
        return Promise.reject(new Error('engine did not answer in time'));
      },
    });
    await assert.rejects(session.destroy(), /engine did not answer in time/);
    await late;
    const gone = Date.now() + 5000;
    while (Date.now() < gone && (await docker('ps', '-aq', '--filter', `id=${session.containerId}`)).trim() !== '')
      await sleep(50);
    await sleep(500); // the engine's destroy event has arrived by now
    assert.deepEqual(lost, [], 'no loss reported for a session being destroyed');
    await assert.rejects(session.spawn(spawnRequest(['true']), new RecordingSink()), { code: 'EXEC_ERR_SESSION_DEAD' });
    Object.assign(container, { remove });
    await session.destroy(); // the next try: the engine answers 404, which is done
    assert.deepEqual(lost, []);
  },
);

test(
  'engine goes away: quick clear errors, lost processes; back again: everything works',
  dockerTestOptions,
  async () => {
    const proxy = new EngineProxy(`/tmp/exec-server-proxy-${randomUUID().slice(0, 8)}.sock`);
    await proxy.start();
    const backend = track(makeBackend({ dockerHost: proxy.dockerHost, pingTimeoutMs: 1500 }));
    await backend.recover();
    const session = await backend.createSession(sessionSpec());
    const sink = new RecordingSink();
    await session.spawn(spawnRequest(['sh', '-c', 'echo up; sleep 300']), sink);
    while (!sink.text().includes('up')) await sleep(10);

    await proxy.stop();
    const exit = await sink.exited;
    assert.equal(exit.kind, 'lost');

    let t = Date.now();
    await assert.rejects(backend.ping(), { code: 'EXEC_ERR_BACKEND_UNAVAILABLE' });
    await assert.rejects(backend.createSession(sessionSpec()), { code: 'EXEC_ERR_BACKEND_UNAVAILABLE' });
    await assert.rejects(session.spawn(spawnRequest(['true']), new RecordingSink()), {
      code: 'EXEC_ERR_BACKEND_UNAVAILABLE',
    });
    assert.ok(Date.now() - t < 3000, `errors took ${Date.now() - t} ms`);

    // A wedged engine (accepts, never answers): ping fails at its deadline, not later.
    await proxy.start('hang');
    t = Date.now();
    await assert.rejects(backend.ping(), { code: 'EXEC_ERR_BACKEND_UNAVAILABLE' });
    await assert.rejects(backend.createSession(sessionSpec()), { code: 'EXEC_ERR_BACKEND_UNAVAILABLE' });
    const wedgedMs = Date.now() - t;
    assert.ok(wedgedMs < 4000, `wedged engine errors took ${wedgedMs} ms`);
    await proxy.stop();

    await proxy.start();
    await backend.ping();
    // The old session's container kept running on the engine: usable again.
    const again = new RecordingSink();
    await session.spawn(spawnRequest(['echo', 'back']), again);
    assert.deepEqual(await again.exited, { kind: 'exited', code: 0 });
    assert.equal(again.text(), 'back\n');
    const fresh = await backend.createSession(sessionSpec());
    await fresh.destroy();
    // The events stream reconnected: an outside kill is noticed again.
    await sleep(1500);
    const lost = new Promise<string>((resolve) => session.onLost(resolve));
    await docker('kill', session.containerId!);
    assert.match(await Promise.race([lost, sleep(8000).then(() => 'timeout')]), /died/);
    await backend.close();
    await proxy.stop();
  },
);

test('50 MB of pipe output into a sink that drops it: bounded server memory', dockerTestOptions, async () => {
  const backend = track(makeBackend());
  const session = await backend.createSession(sessionSpec());
  global.gc?.();
  const base = process.memoryUsage();
  let peakRss = base.rss;
  let peakHeap = base.heapUsed;
  const sampler = setInterval(() => {
    const m = process.memoryUsage();
    peakRss = Math.max(peakRss, m.rss);
    peakHeap = Math.max(peakHeap, m.heapUsed);
  }, 10);
  const sink = new RecordingSink();
  sink.keep = false;
  const t = Date.now();
  await session.spawn(spawnRequest(['sh', '-c', 'head -c 52428800 /dev/zero; head -c 1000 /dev/zero >&2']), sink);
  assert.deepEqual(await sink.exited, { kind: 'exited', code: 0 });
  const ms = Date.now() - t;
  clearInterval(sampler);
  assert.equal(sink.bytes, 52428800 + 1000);
  const rssMb = (peakRss - base.rss) / 1024 / 1024;
  const heapMb = (peakHeap - base.heapUsed) / 1024 / 1024;
  console.log(
    `# 50 MB pipe output: ${ms} ms, peak RSS growth ${rssMb.toFixed(1)} MB, peak heap growth ${heapMb.toFixed(1)} MB`,
  );
  assert.ok(rssMb < 64, `RSS grew by ${rssMb.toFixed(1)} MB`);
  assert.ok(heapMb < 32, `heap grew by ${heapMb.toFixed(1)} MB`);
  await session.destroy();
});

test(
  'warm pool: sessions come from pre-started containers, refilled; recovery re-adopts claimed ones',
  dockerTestOptions,
  async () => {
    const backend = track(makeBackend({ warmPoolSize: 2 }));
    assert.equal(await backend.poolFull(60_000), true);
    const poolIds = await poolContainerIds(backend);
    assert.equal(poolIds.length, 2);
    let t = Date.now();
    const spec = sessionSpec({ tenant: asTenantId('team a/b') });
    const s = await backend.createSession(spec);
    const pooledMs = Date.now() - t;
    assert.ok(poolIds.includes(s.containerId!));
    const name = (await docker('inspect', '-f', '{{.Name}}', s.containerId!)).trim();
    assert.match(name, new RegExp(`^/exs\\.${spec.id}\\.`));
    const sink = new RecordingSink();
    await s.spawn(spawnRequest(['sh', '-c', 'echo pooled > /workspace/p; pwd']), sink);
    assert.deepEqual(await sink.exited, { kind: 'exited', code: 0 });
    // A spec that does not match the pool gets its own container.
    t = Date.now();
    const own = await backend.createSession(sessionSpec({ network: true }));
    const coldMs = Date.now() - t;
    assert.ok(!poolIds.includes(own.containerId!));
    console.log(`# createSession: ${pooledMs} ms from the warm pool, ${coldMs} ms cold`);
    assert.equal(await backend.poolFull(60_000), true);

    // Restart: the claimed container comes back as its session, unclaimed pool containers go.
    const listPool = (): Promise<string[]> => poolContainerIds(backend);
    const unclaimed = (await listPool()).filter((id) => id !== s.containerId);
    assert.equal(unclaimed.length, 2);
    const second = track(makeBackend({ instanceId: backend.options.instanceId }));
    const recovered = await second.recover();
    const r = recovered.find((x) => x.session.id === spec.id);
    assert.ok(r, 'claimed pool container recovered');
    assert.equal(r.tenant, 'team a/b');
    assert.equal(r.session.containerId, s.containerId);
    const left = await listPool();
    assert.ok(left.includes(s.containerId!));
    for (const id of unclaimed) assert.ok(!left.includes(id), 'unclaimed pool containers are removed');
    await second.close();
    await backend.close();
    const after = (
      await docker('ps', '-aq', '--filter', `label=exec-server.instance=${backend.options.instanceId}`)
    ).trim();
    assert.equal(after, '');
  },
);
