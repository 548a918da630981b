/**
 * One live server per instance id on an engine (src/backends/docker/engine/instance-lease.ts): a
 * second server started with the id of a running one neither adopts nor removes its containers;
 * it waits for the holder and fails with EXEC_ERR_INSTANCE_IN_USE, or takes over once the holder
 * is gone (SIGKILL included: the engine drops the lease with the holder's connection).
 */
import assert from 'node:assert/strict';
import { spawnDevServer } from '../support/dev-server.ts';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { leaseName } from '../../src/backends/docker/engine/instance-lease.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';
import { docker, makeBackend, RecordingSink, sessionSpec, sleep, spawnRequest } from './helpers.ts';

async function running(containerId: string): Promise<boolean> {
  return (await docker('inspect', '-f', '{{.State.Running}}', containerId)).trim() === 'true';
}

test(
  "a second backend with a live holder's instance id waits, fails with its code, and touches nothing",
  dockerTestOptions,
  async (t) => {
    const first = makeBackend();
    t.after(() => first.close());
    assert.deepEqual(await first.recover(), []);
    const lease = (await docker('ps', '-q', '--filter', `name=^${leaseName(first.options.instanceId)}$`)).trim();
    assert.notEqual(lease, '', 'the holder keeps a lease container');

    const s = await first.createSession(sessionSpec());
    const pooled = await first.createSession(sessionSpec());
    const sink = new RecordingSink();
    await s.spawn(
      spawnRequest(['sh', '-c', 'for i in 1 2 3 4 5 6 7 8 9 10; do echo line-$i; sleep 0.3; done; exit 3']),
      sink,
    );

    const second = makeBackend({ instanceId: first.options.instanceId, instanceLeaseWaitMs: 1500 });
    t.after(() => second.close());
    const started = Date.now();
    await assert.rejects(second.recover(), (err: Error & { code?: string }) => {
      assert.equal(err.code, 'EXEC_ERR_INSTANCE_IN_USE');
      assert.match(err.message, new RegExp(first.options.instanceId));
      assert.match(err.message, /--instance-id/);
      return true;
    });
    assert.ok(Date.now() - started >= 1400, 'it waited for the holder first');

    // The holder's sessions and their command went on untouched.
    assert.deepEqual(await sink.exited, { kind: 'exited', code: 3 });
    assert.equal(sink.text('stdout'), Array.from({ length: 10 }, (_, i) => `line-${i + 1}\n`).join(''));
    assert.ok(await running(s.containerId!));
    assert.ok(await running(pooled.containerId!));
    assert.deepEqual(sink.violations, []);

    // Closing the holder gives the lease up: the next one takes it at once.
    await first.close();
    const third = makeBackend({ instanceId: first.options.instanceId, instanceLeaseWaitMs: 5000 });
    t.after(() => third.close());
    assert.deepEqual(await third.recover(), []);
    await third.close();
    assert.equal((await docker('ps', '-aq', '--filter', `name=^${leaseName(first.options.instanceId)}$`)).trim(), '');
  },
);

test(
  'servers: a second one waits while the first runs, and adopts its sessions once it is SIGKILLed',
  dockerTestOptions,
  async (t) => {
    const instanceId = `lease-${randomUUID().slice(0, 8)}`;
    const serve = () => spawnDevServer({ image: TEST_IMAGE, instanceId, stderr: 'capture' });
    const a = await serve();
    t.after(() => a.kill());
    await a.ready();
    const base = a.http;
    const created = await fetch(`${base}/v1/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(created.status, 201);
    const { sessionId, containerId } = (await created.json()) as { sessionId: string; containerId: string };

    const b = await serve();
    t.after(() => b.kill());
    for (let i = 0; i < 600 && !/holds instance id/.test(b.stderr()); i++) await sleep(100);
    assert.match(b.stderr(), new RegExp(`another server holds instance id ${instanceId}`));
    await sleep(1000);
    assert.equal(b.child.exitCode, null, 'the second server waits');
    assert.ok(await running(containerId), "the first server's session is untouched");
    assert.equal((await fetch(`${base}/v1/sessions/${sessionId}`)).status, 200);

    await a.kill();
    await b.ready();
    const second = b.http;
    const adopted = await fetch(`${second}/v1/sessions/${sessionId}`);
    assert.equal(adopted.status, 200, 'the successor adopted the session');
    const deleted = await fetch(`${second}/v1/sessions/${sessionId}`, { method: 'DELETE' });
    assert.ok(deleted.status < 300, `the successor acts for it (DELETE answered ${deleted.status})`);
    assert.equal((await docker('ps', '-aq', '--filter', `id=${containerId}`)).trim(), '');
    await b.stop();
  },
);
