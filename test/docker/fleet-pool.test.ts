/**
 * Warm pools in a fleet (docs/architecture.md, "Fleet"): each replica keeps its own pool. A
 * session made from A's pool is used through B; a replica that starts while the others run
 * leaves their pool containers alone; A SIGKILLed: its session (a claimed pool container) is
 * taken over through B, and its unclaimed pool containers are removed by another replica's scan
 * while B's and C's stay; B stopped with SIGTERM removes its own pool containers at its hand-over
 * and its session goes on through C (an MCP client on B is told, finds its MCP session gone on C
 * and goes on with a new one bound to the session). `--max-sessions` counts per replica: a replica at its cap
 * refuses creates while another has room, and still takes over a session whose owner is gone.
 * The scan removes by name: a pool container its maker renamed for a session after the scan
 * listed it stays.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { type TestContext, test } from 'node:test';
import Docker from 'dockerode';
import { DockerFleet } from '../../src/backends/docker/fleet.ts';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import type { McpDrainingData } from '../../src/mcp/drain-notice.ts';
import { call, mcpClient, textOf } from '../mcp/helpers.ts';
import type { DevServer } from '../support/dev-server.ts';
import { sleep } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';
import { Fleet } from './fleet-replicas.ts';
import { docker } from './helpers.ts';

const instanceId = `fleet-pool-${randomUUID().slice(0, 8)}`;
const fleet = new Fleet({
  instanceId,
  flags: () => ['--warm-pool', '2', '--warm-pool-max', '2', '--max-sessions', '2'],
});

interface Pooled {
  readonly id: string;
  readonly name: string;
  readonly replica: string;
}

/** The instance's warm-pool containers, claimed (renamed for a session) or not. */
async function pooled(): Promise<Pooled[]> {
  const out = await docker(
    ...['ps', '-a', '--no-trunc', '--filter', `label=exec-server.instance=${instanceId}`],
    ...['--filter', 'label=exec-server.pool=true', '--format', '{{.ID}} {{.Names}} {{.Label "exec-server.replica"}}'],
  );
  return out
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [id = '', name = '', replica = ''] = line.split(' ');
      return { id, name, replica };
    });
}

const unclaimed = (list: Pooled[], replica: string): string[] =>
  list
    .filter((p) => p.replica === replica && p.name.startsWith('exec-server-pool-'))
    .map((p) => p.id)
    .sort();

async function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(250);
  }
}

/** Replica `name`'s warm-pool containers ready to claim, as its /metrics reports them (its one runtime pool). */
async function warmReady(name: string): Promise<number> {
  const r = fleet.replicas.find((x) => x.name === name);
  assert.ok(r !== undefined, `replica ${name}`);
  const text = await (await fetch(`${r.http}/metrics`)).text();
  const ready = /^exec_server_warm_pool_ready\{pool="([^"]+)"\} (\d+)$/m.exec(text);
  assert.ok(ready !== null, `replica ${name} reports its warm pool:\n${text.slice(0, 400)}`);
  return Number(ready[2]);
}

/** Waits until each of `names` holds a full pool whose agents answer; the pool containers then. */
async function settled(names: readonly string[]): Promise<Pooled[]> {
  const full = async () => {
    const list = await pooled();
    return names.every((n) => unclaimed(list, n).length === 2) ? list : undefined;
  };
  await until(`the pools of ${names.join(', ')}`, full, 60_000);
  // A container is in its pool once its agent answers, a moment after it runs (longer under
  // load): each replica's /metrics shows when, rather than a fixed wait.
  const ready = async () => {
    for (const n of names) if ((await warmReady(n)) !== 2) return undefined;
    return true;
  };
  await until(`the pools of ${names.join(', ')} ready`, ready, 60_000);
  return until(`the pools of ${names.join(', ')}`, full, 60_000);
}

async function create(r: DevServer): Promise<{ status: number; body: { sessionId?: string; code?: string } }> {
  const res = await fetch(`${r.http}/v1/sessions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  return { status: res.status, body: (await res.json()) as { sessionId?: string; code?: string } };
}

async function echo(r: DevServer, id: string, text: string): Promise<void> {
  const res = await fetch(`${r.http}/v1/sessions/${id}/exec_command`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ cmd: `echo ${text}`, login: false }),
  });
  const body = (await res.json()) as { exit_code?: number; output?: string };
  assert.equal(res.status, 200, JSON.stringify(body));
  assert.equal(body.exit_code, 0);
  assert.match(body.output ?? '', new RegExp(`^${text}$`, 'm'));
}

/**
 * An MCP client on `from`, bound to session `id` (`from` owns it), while `from` stops with
 * SIGTERM: the client is told, its MCP session is gone for the fleet (404 on `to`), and a new one
 * on `to` bound to the session named in the notice goes on.
 */
async function mcpAcrossDrain(st: TestContext, r: { from: DevServer; to: DevServer }, id: string): Promise<void> {
  const { from, to } = r;
  const onFrom = await mcpClient(st, from.http, { headers: { 'x-exec-session': id } });
  const notices: McpDrainingData[] = [];
  onFrom.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    if (n.params.logger === 'exec-server') notices.push(n.params.data as McpDrainingData);
  });
  onFrom.client.onerror = () => {}; // its stream ends with `from`
  assert.match(textOf(await call(onFrom.client, 'exec_command', { cmd: 'echo on-b' })), /on-b/);
  await from.stop();
  await until('the drain notice', async () => (notices.length > 0 ? true : undefined), 5000);
  assert.equal(notices[0]?.event, 'server/draining');
  assert.equal(notices[0]?.sessionId, id, 'it names the session to continue on');
  const stale = await fetch(`${to.http}/mcp`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-session-id': onFrom.transport.sessionId ?? '',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  });
  assert.equal(stale.status, 404);
  const onTo = await mcpClient(st, to.http, { headers: { 'x-exec-session': notices[0]?.sessionId ?? '' } });
  assert.match(textOf(await call(onTo.client, 'exec_command', { cmd: 'echo via-c-mcp' })), /via-c-mcp/);
}

test('warm pools in a fleet: own pools, taken over sessions, a gone replica’s pool removed', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 150_000,
}, async (t) => {
  const [a, b] = await fleet.begin(t, 'a', 'b');
  const before = await settled(['a', 'b']);

  const made = await create(a);
  assert.equal(made.status, 201);
  const id = String(made.body.sessionId);
  const claimed = (await pooled()).find((p) => p.name.startsWith(`exs.${id}.`));
  assert.ok(claimed, 'the session is a container of the warm pool, renamed for it');
  assert.ok(unclaimed(before, 'a').includes(claimed.id), "one of A's");
  await echo(b, id, 'via-b');

  // --max-sessions 2 is per replica: A is full with two, B makes two more (the fleet has four).
  assert.equal((await create(a)).status, 201);
  const over = await create(a);
  assert.equal(over.status, 429);
  assert.equal(over.body.code, 'EXEC_ERR_SESSION_LIMIT');
  for (let i = 0; i < 2; i++) assert.equal((await create(b)).status, 201, 'B counts its own sessions only');

  const quiet = await settled(['a', 'b']);
  const c = await fleet.start('c');
  const withC = await settled(['a', 'b', 'c']);
  const ofB = unclaimed(withC, 'b');
  assert.deepEqual(ofB, unclaimed(quiet, 'b'), "C's start left B's pool alone");
  assert.deepEqual(unclaimed(withC, 'a'), unclaimed(quiet, 'a'), "and A's");
  assert.doesNotMatch(c.stderr(), /removing|took over/, 'C removed and adopted nothing');

  await t.test('A SIGKILLed: its session goes on through B, its pool is removed by a scan', async () => {
    a.child.kill('SIGKILL');
    await new Promise((r) => a.child.once('exit', r));
    await echo(b, id, 'taken-over');
    assert.match(b.stderr(), /took over a session whose owner is gone/);
    // B took a session over past its cap of 2 (a session that exists stays served); creates wait for room.
    const full = await create(b);
    assert.equal(full.status, 429);
    assert.equal(full.body.code, 'EXEC_ERR_SESSION_LIMIT');
    // Every replica scans every 30-35 s; A's unclaimed containers go with the first scan after its death.
    await until(
      'A’s pool removed',
      async () => (unclaimed(await pooled(), 'a').length === 0 ? true : undefined),
      50_000,
    );
    assert.match(b.stderr() + c.stderr(), /removed the warm-pool containers of replicas that are gone/);
    const after = await pooled();
    assert.deepEqual(unclaimed(after, 'b'), ofB, "B's pool stays");
    assert.deepEqual(unclaimed(after, 'c'), unclaimed(withC, 'c'), "C's pool stays");
    assert.ok(
      after.some((p) => p.id === claimed.id),
      'the claimed container, a session, stays',
    );
  });

  await t.test('B stopped with SIGTERM: its pool goes with it, its session goes on through C', async (st) => {
    // An MCP client on B, bound to the session B owns now, is told of the drain (then goes on via C).
    await mcpAcrossDrain(st, { from: b, to: c }, id);
    assert.deepEqual(unclaimed(await pooled(), 'b'), [], 'B removed its pool at its hand-over');
    await echo(c, id, 'via-c');
    assert.equal(unclaimed(await pooled(), 'c').length, 2, "C's pool is whole");
  });
});

test('the pool scan removes by name: a container renamed for a session meanwhile stays', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 60_000,
}, async (t) => {
  const engine = new Docker({ socketPath: '/var/run/docker.sock' });
  const instance = `fleet-sweep-${randomUUID().slice(0, 8)}`;
  const make = async (name: string) =>
    engine.createContainer({
      name,
      Image: TEST_IMAGE,
      Cmd: ['true'],
      Labels: { 'exec-server.instance': instance, 'exec-server.pool': 'true', 'exec-server.replica': 'gone' },
    });
  const taken = await make(`exec-server-pool-${randomUUID()}`);
  const left = await make(`exec-server-pool-${randomUUID()}`);
  t.after(async () => {
    for (const c of [taken, left]) await c.remove({ force: true }).catch(() => undefined);
  });
  const listed = await engine.listContainers({ all: true, filters: { label: [`exec-server.instance=${instance}`] } });
  assert.equal(listed.length, 2);
  // Its maker claims one after the scan listed both (the scan works on that list).
  await taken.rename({ name: `exs.${randomUUID()}.${Buffer.from('team').toString('hex')}` });
  const silent = { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} };
  const fleet = new DockerFleet(
    {
      docker: engine,
      listOwn: async () => listed,
      adoptRunning: async () => undefined,
      adoptHibernated: async () => undefined,
    },
    instance,
    { replicaId: 'scanner', advertiseUrl: 'http://127.0.0.1:1' },
    5000,
    silent,
  );
  fleet.liveReplicas = async () => new Map();
  await fleet.sweep();
  const after = await engine.listContainers({ all: true, filters: { label: [`exec-server.instance=${instance}`] } });
  assert.deepEqual(
    after.map((c) => c.Id),
    [taken.id],
    'the unclaimed one went, the claimed one stayed',
  );
});
