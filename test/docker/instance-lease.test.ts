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
import { asTenantId } from '../../src/ids.ts';
import type { DockerFleet } from '../../src/backends/docker/fleet.ts';
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
  'replicas of a fleet hold one lease each and leave each other alone; a lone server with their id waits and fails',
  dockerTestOptions,
  async (t) => {
    const instanceId = `fleet-${randomUUID().slice(0, 8)}`;
    const replica = (replicaId: string, waitMs = 5000) =>
      makeBackend({
        instanceId,
        instanceLeaseWaitMs: waitMs,
        fleet: { replicaId, advertiseUrl: `http://127.0.0.1:1/${replicaId}` },
      });
    const a = replica('a');
    t.after(() => a.close());
    assert.deepEqual(await a.recover(), []);
    const s = await a.createSession(sessionSpec());
    const sink = new RecordingSink();
    await s.spawn(spawnRequest(['sh', '-c', 'sleep 1; echo still-here; exit 4']), sink);

    const b = replica('b');
    t.after(() => b.close());
    assert.deepEqual(await b.recover(), [], "b adopts nothing of a's");
    for (const id of ['a', 'b']) {
      const lease = (await docker('ps', '-q', '--filter', `name=^${leaseName(instanceId, id)}$`)).trim();
      assert.notEqual(lease, '', `replica ${id} holds its own lease`);
    }
    assert.deepEqual(await sink.exited, { kind: 'exited', code: 4 });
    assert.equal(sink.text('stdout'), 'still-here\n');
    assert.ok(await running(s.containerId!), "a's session runs on");
    const live = await b.fleet!.locate(s.id, asTenantId('alice'));
    assert.equal(live.kind, 'remote');

    // The same replica id twice is one replica too many: it waits, then fails.
    const twin = replica('a', 1000);
    t.after(() => twin.close());
    await assert.rejects(twin.recover(), { code: 'EXEC_ERR_INSTANCE_IN_USE' });
    // A lone server (no --fleet) with the fleet's id neither adopts nor removes: it fails.
    const lone = makeBackend({ instanceId, instanceLeaseWaitMs: 1000 });
    t.after(() => lone.close());
    await assert.rejects(lone.recover(), (err: Error & { code?: string }) => {
      assert.equal(err.code, 'EXEC_ERR_INSTANCE_IN_USE');
      assert.match(err.message, /fleet/);
      return true;
    });
    assert.ok(await running(s.containerId!));

    // A's lease gone (a hand-over keeps its containers): its session is an orphan, taken over once.
    assert.deepEqual(await b.fleet!.orphans(), [], "a live replica's session is nobody's orphan");
    await a.handOver();
    assert.deepEqual(
      (await b.fleet!.orphans()).map((o) => o.id),
      [s.id],
    );
    const taken = await b.fleet!.takeOver(s.id, asTenantId('alice'));
    assert.ok(taken, 'b claims and adopts it');
    const c = replica('c');
    t.after(() => c.close());
    assert.deepEqual(await c.recover(), [], 'a replica that starts now finds it owned by b');
    assert.equal(await c.fleet!.takeOver(s.id, asTenantId('alice')), undefined, 'nor can it claim it');
    assert.deepEqual(await b.fleet!.orphans(), []);
    await taken.session.destroy();
  },
);

test(
  'a replica whose session another replica claimed lets it go: no attach from here, no removal',
  dockerTestOptions,
  async (t) => {
    const instanceId = `fence-${randomUUID().slice(0, 8)}`;
    const replica = (replicaId: string) =>
      makeBackend({ instanceId, fleet: { replicaId, advertiseUrl: `http://127.0.0.1:1/${replicaId}` } });
    const a = replica('a');
    const b = replica('b');
    t.after(() => a.close());
    t.after(() => b.close());
    await a.recover();
    await b.recover();
    const s = await a.createSession(sessionSpec());
    const onA = new RecordingSink();
    await s.spawn(spawnRequest(['sh', '-c', 'echo start; sleep 2; echo done; exit 6']), onA);
    // As if A had lost its lease: B claims the session and adopts it (the agent takes B's link).
    const [info] = await b.docker.listContainers({ filters: { id: [s.containerId!] } });
    assert.ok(info);
    assert.ok(await (b.fleet as DockerFleet).registry.claim(s.id, 1, 'b', info.ImageID));
    const taken = await b.adoptRunning(info, s.id, asTenantId('alice'));
    assert.ok(taken);
    const onB = new RecordingSink();
    assert.equal(await taken.adoptProcesses?.(() => onB), 1);
    assert.deepEqual(await onB.exited, { kind: 'exited', code: 6 }, 'B serves the command to its end');
    assert.match(onB.text('stdout'), /done\n$/);
    const lostOnA = await onA.exited;
    assert.equal(lostOnA.kind, 'lost');
    assert.match(
      JSON.stringify(lostOnA),
      /owned by replica b/,
      'A did not attach again: it says where the session went',
    );
    await s.destroy();
    assert.ok(await running(s.containerId!), "A's delete leaves B's container alone");
    await taken.session.destroy();
    assert.equal((await docker('ps', '-aq', '--filter', `id=${s.containerId}`)).trim(), '');
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
