/**
 * Template pools in a fleet (docs/architecture.md, "Fleet"): two replicas with one instance id,
 * one `--checkpoint-dir` and `--warm-pool-templates warm=1`. A live template made through A fills
 * a pool on each replica; a session made from it through either replica claims that replica's
 * container (its memory restored: a file on its tmpfs is there); A SIGKILLed: its unclaimed
 * template-pool container is removed by B's scan, the session claimed on A goes on through B.
 * The template deleted through B removes the pool container C made of it.
 */
import './use-runsc.ts';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { dockerTestOptions, TEST_IMAGE } from '../docker/engine.ts';
import { docker, removeInstanceContainers } from '../docker/helpers.ts';
import { type DevServer, spawnDevServer } from '../support/dev-server.ts';
import { sleep } from '../support/harness.ts';

const GVISOR = { runtime: 'runsc', sandbox: { type: 'danger-full-access' }, approvalPolicy: 'never' };
const instanceId = `fleet-template-${randomUUID().slice(0, 8)}`;

async function post(
  r: DevServer,
  path: string,
  body: unknown,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${r.http}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function run(r: DevServer, id: string, cmd: string): Promise<string> {
  const a = await post(r, `/v1/sessions/${id}/exec_command`, { cmd, login: false });
  assert.equal(a.status, 200, JSON.stringify(a.body));
  return String(a.body['output'] ?? '');
}

/** Unclaimed template-pool containers of each replica: replica → container ids. */
async function pools(): Promise<Map<string, string[]>> {
  const out = await docker(
    ...['ps', '-a', '--no-trunc', '--filter', `label=exec-server.instance=${instanceId}`],
    ...['--filter', 'label=exec-server.pool=true', '--format', '{{.ID}} {{.Names}} {{.Label "exec-server.replica"}}'],
  );
  const map = new Map<string, string[]>();
  for (const line of out.split('\n').filter(Boolean)) {
    const [id = '', name = '', replica = ''] = line.split(' ');
    if (name.startsWith('exec-server-pool-')) map.set(replica, [...(map.get(replica) ?? []), id]);
  }
  return map;
}

/** The template pool's containers ready on replica `r`, as its /metrics reports them. */
async function warmReady(r: DevServer): Promise<number> {
  const text = await (await fetch(`${r.http}/metrics`)).text();
  const target = /^exec_server_warm_pool_target\{pool="template:warm"\} (\d+)$/m.exec(text);
  const ready = /^exec_server_warm_pool_ready\{pool="template:warm"\} (\d+)$/m.exec(text);
  assert.ok(ready !== null && target !== null, `the replica reports its template pool:\n${text.slice(0, 400)}`);
  return Number(target[1]) === 1 ? Number(ready[1]) : 0;
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(250);
  }
}

async function cleanUp(replicas: readonly DevServer[], dir: string, snapshotId: string | undefined): Promise<void> {
  if (process.env.FLEET_TEST_LOGS) for (const r of replicas) console.error(`--- replica\n${r.stderr()}`);
  for (const r of replicas) r.child.kill('SIGKILL');
  await sleep(300);
  await removeInstanceContainers(instanceId);
  if (snapshotId !== undefined) await docker('rmi', '-f', snapshotId).catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
}

/** A replica with a template pool of one, its checkpoints in `dir` (shared by the replicas). */
function spawnReplica(name: string, dir: string): Promise<DevServer> {
  return spawnDevServer({
    image: TEST_IMAGE,
    instanceId,
    flags: [
      ...['--fleet', '--replica-id', name, '--warm-pool', '0', '--allowed-runtimes', 'runsc,runc'],
      ...['--checkpoint-dir', dir, '--warm-pool-templates', 'warm=1'],
    ],
    logLevel: 'info',
    stderr: 'capture',
  });
}

test('template pools in a fleet: one per replica, claimed where the session is made, removed when gone', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 170_000,
}, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'exec-server-fleet-checkpoints-'));
  const replicas: DevServer[] = [];
  let snapshotId: string | undefined;
  t.after(() => cleanUp(replicas, dir, snapshotId));
  const start = async (name: string) => {
    const r = await spawnReplica(name, dir);
    replicas.push(r);
    await r.ready();
    return r;
  };
  const [a, b] = await Promise.all([start('a'), start('b')]);

  const source = await post(a, '/v1/sessions', GVISOR);
  assert.equal(source.status, 201, JSON.stringify(source.body));
  const sourceId = String(source.body['sessionId']);
  await run(a, sourceId, 'echo in-memory > /dev/shm/marker');
  const snap = await post(a, `/v1/sessions/${sourceId}/snapshots`, { memory: true, name: 'warm' });
  assert.equal(snap.status, 201, JSON.stringify(snap.body));
  snapshotId = String(snap.body['snapshotId']);
  const gone = await fetch(`${a.http}/v1/sessions/${sourceId}`, { method: 'DELETE' });
  assert.equal(gone.status, 204, 'the source is not needed any more');

  // Each replica finds the template (B within its 5 s lookup) and fills its own pool of one; a
  // restored container joins its pool once its agent answers, which the replica's /metrics shows.
  const full = async () => {
    const p = await pools();
    return p.get('a')?.length === 1 && p.get('b')?.length === 1;
  };
  await until('both template pools', full, 60_000);
  await until('both pools ready', async () => (await warmReady(a)) === 1 && (await warmReady(b)) === 1, 60_000);
  const before = await pools();

  const claim = async (r: DevServer, replica: string) => {
    const made = await post(r, '/v1/sessions', { ...GVISOR, snapshot: snapshotId });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const id = String(made.body['sessionId']);
    const container = (
      await docker('ps', '-a', '--no-trunc', '--filter', `name=exs.${id}.`, '--format', '{{.ID}}')
    ).trim();
    assert.deepEqual([container], before.get(replica), `claimed from ${replica}'s pool`);
    assert.match(await run(r, id, 'cat /dev/shm/marker'), /^in-memory$/m, 'its memory restored');
    return id;
  };
  const onB = await claim(b, 'b');
  const onA = await claim(a, 'a');
  assert.match(await run(a, onB, 'echo via-a'), /^via-a$/m, "B's session through A");

  // A refills its pool, then dies: B's scan removes the refill, B takes A's session over.
  await until('A refilled', async () => (await pools()).get('a')?.length === 1, 60_000);
  a.child.kill('SIGKILL');
  await new Promise((r) => a.child.once('exit', r));
  assert.match(await run(b, onA, 'cat /dev/shm/marker'), /^in-memory$/m, "A's session goes on through B");
  await until('A’s template pool removed', async () => (await pools()).get('a') === undefined, 50_000);
  assert.equal((await pools()).get('b')?.length, 1, "B's pool stays");

  // The template deleted through B while C's pool holds a container of it: C's goes too.
  const c = await start('c');
  await until('C’s template pool', async () => (await pools()).get('c')?.length === 1, 60_000);
  for (const id of [onA, onB]) {
    const res = await fetch(`${b.http}/v1/sessions/${id}`, { method: 'DELETE' });
    assert.equal(res.status, 204);
  }
  const del = await fetch(`${b.http}/v1/snapshots/${snapshotId}`, { method: 'DELETE' });
  assert.equal(
    del.status,
    204,
    `${await del.text()} ${await docker('ps', '-a', '--filter', `ancestor=${snapshotId}`, '--format', '{{.Names}} {{.State}} {{.Label "exec-server.replica"}} {{.Label "exec-server.instance"}}')}`,
  );
  assert.deepEqual([...(await pools()).keys()], [], 'no pool container of the template is left');
  await sleep(6000); // a lookup round: neither pool fills from a deleted template
  assert.deepEqual([...(await pools()).keys()], []);
  assert.match(await run(c, (await post(c, '/v1/sessions', GVISOR)).body['sessionId'] as string, 'echo ok'), /^ok$/m);
});
