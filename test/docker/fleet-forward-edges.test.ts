/**
 * Edges of forwarding in a fleet, with real replicas on the real engine: a WebSocket relayed to
 * an owner paused with SIGSTOP (it accepts the connection and keeps its lease, but never answers
 * the upgrade) or to one whose advertised URL refuses connections, and a session's DELETE
 * forwarded to an owner that carries it out and is SIGKILLed before it answers.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { RpcConnection, RpcError } from '../../src/client/rpc-connection.ts';
import { requestJson, createSession } from '../http/helpers.ts';
import { freePort } from '../support/free-port.ts';
import { sleep } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';
import { Fleet, type Replica } from './fleet-replicas.ts';
import { docker } from './helpers.ts';

const instanceId = `fleet-edges-${randomUUID().slice(0, 8)}`;
const fleet = new Fleet({ instanceId, flags: () => ['--max-sessions-per-tenant', '20'] });
const replica = (name: string, extra: readonly string[] = []): Promise<Replica> => fleet.start(name, extra);
const cleanUp = fleet.cleanUp;

const tookOver = (id: string): RegExp => new RegExp(`"sessionId":"${id}"[^\n]*took over a session whose owner is gone`);

/** Resolves with `p`'s outcome, or 'pending' when it has none after `ms`. */
function settled<T>(p: Promise<T>, ms: number): Promise<{ value: T } | { error: unknown } | 'pending'> {
  return Promise.race([
    p.then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    ),
    sleep(ms).then(() => 'pending' as const),
  ]);
}

const SPEC = { sandbox: { type: 'danger-full-access' }, approvalPolicy: 'never' };
const newSession = async (r: Replica): Promise<string> => (await createSession(r, SPEC)).sessionId;

test('a WebSocket relayed to a paused owner fails in about 10 s; an open relay, idle, stays', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  const [a, b] = await fleet.begin(t, 'wa', 'wb');
  const id = await newSession(a);
  const conn = await RpcConnection.open(b.url);
  t.after(() => conn.socket.terminate());

  a.child.kill('SIGSTOP');
  const started = Date.now();
  const first = await settled(conn.request('initialize', { clientName: 'fleet-edges', resumeSessionId: id }), 25_000);
  const waited = Date.now() - started;
  a.child.kill('SIGCONT');
  assert.notEqual(first, 'pending', `an initialize relayed through B to a paused owner hung (${waited} ms)`);
  assert.ok(
    first !== 'pending' && 'error' in first,
    `a paused owner's session was initialized: ${JSON.stringify(first)}`,
  );
  assert.ok(first.error instanceof RpcError, String(first.error));
  assert.equal(first.error.code, 'EXEC_ERR_BACKEND_UNAVAILABLE', first.error.message);
  // The owner's silence is noticed after 10 s of no answer from its /healthz either, not sooner.
  assert.ok(waited >= 8_000 && waited < 24_000, `answered in ${waited} ms`);
  assert.doesNotMatch(b.stderr(), tookOver(id), 'the paused owner kept its lease: nothing taken over');

  // The owner runs again: the same connection initializes, relayed, and an idle relay is not
  // cut by the owner watch (it ends with the upgrade): quiet for longer than its 10 s bound.
  const again = await settled(conn.request('initialize', { clientName: 'fleet-edges', resumeSessionId: id }), 25_000);
  assert.ok(again !== 'pending' && 'value' in again, `initialize once the owner runs: ${JSON.stringify(again)}`);
  assert.equal((again.value as { sessionId: string }).sessionId, id);
  conn.notify('initialized', {});
  await sleep(14_000);
  assert.equal(conn.socket.readyState, conn.socket.OPEN, `the idle relay was closed (${conn.closeCode})`);
  const info = await settled(conn.request('environment/info', {}), 10_000);
  assert.ok(info !== 'pending' && 'value' in info, `a call over the idle relay: ${JSON.stringify(info)}`);
  assert.doesNotMatch(a.stderr() + b.stderr(), tookOver(id), 'the session stayed with its owner');
});

test('a WebSocket relayed to an owner whose URL refuses connections is told the owner does not answer', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  t.after(cleanUp);
  // A's lease names a URL where nothing listens: B's relay is refused while A lives on.
  const nowhere = `http://127.0.0.1:${await freePort()}`;
  const [a, b] = await Promise.all([replica('ua', ['--advertise-url', nowhere]), replica('ub')]);
  const id = await newSession(a);
  const conn = await RpcConnection.open(b.url);
  t.after(() => conn.socket.terminate());

  const first = await settled(conn.request('initialize', { clientName: 'fleet-edges', resumeSessionId: id }), 25_000);
  assert.ok(first !== 'pending' && 'error' in first, `a session whose owner B cannot reach: ${JSON.stringify(first)}`);
  assert.ok(first.error instanceof RpcError, String(first.error));
  // Not EXEC_ERR_SESSION_NOT_FOUND: the session exists, its owner is only out of B's reach.
  assert.equal(first.error.code, 'EXEC_ERR_BACKEND_UNAVAILABLE', first.error.message);
  assert.doesNotMatch(b.stderr(), tookOver(id), 'A kept its lease: B did not take the session over');

  // Nothing reached a session: the same connection may initialize again, here a new session on B.
  const fresh = await settled(conn.request('initialize', { clientName: 'fleet-edges' }), 25_000);
  assert.ok(fresh !== 'pending' && 'value' in fresh, `a second initialize: ${JSON.stringify(fresh)}`);
  assert.notEqual((fresh.value as { sessionId: string }).sessionId, id);
});

/**
 * A unix-socket proxy to the engine for one replica: it passes everything, except that the
 * first request matching the held pattern (and whatever follows it on that connection) is held,
 * never passed on nor answered, so the replica waits there. With `pass`, that request reaches
 * the engine, which carries it out, and only its answer is held.
 */
class HoldingEngineProxy {
  readonly path = join(tmpdir(), `${instanceId}.sock`);
  readonly #sockets = new Set<Socket>();
  #server: Server | undefined;
  #pattern: RegExp | undefined;
  #pass = false;
  #onHeld: (() => void) | undefined;

  get dockerHost(): string {
    return `unix://${this.path}`;
  }

  /** Resolves once a request matching `pattern` arrived (and is held, or passed with its answer held). */
  hold(pattern: RegExp, { pass = false } = {}): Promise<void> {
    this.#pattern = pattern;
    this.#pass = pass;
    return new Promise((resolve) => {
      this.#onHeld = resolve;
    });
  }

  async start(target = '/var/run/docker.sock'): Promise<void> {
    rmSync(this.path, { force: true });
    const server = createServer((client) => {
      const upstream = createConnection(target);
      for (const s of [client, upstream]) {
        this.#sockets.add(s);
        s.on('close', () => this.#sockets.delete(s));
        s.on('error', () => s.destroy());
      }
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
      let held = false;
      let passing = false;
      client.on('data', (chunk: Buffer) => {
        if (!held && this.#pattern?.test(chunk.toString('latin1'))) {
          held = true;
          passing = this.#pass;
          this.#pattern = undefined;
          this.#onHeld?.();
        }
        if (!held || passing) upstream.write(chunk);
      });
      upstream.on('data', (chunk: Buffer) => {
        if (!held) client.write(chunk);
      });
    });
    await new Promise<void>((resolve) => server.listen(this.path, resolve));
    this.#server = server;
  }

  async stop(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    const server = this.#server;
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()));
    rmSync(this.path, { force: true });
  }
}

/** Replica `${tag}a`, whose engine calls go through a HoldingEngineProxy, replica `${tag}b`, and a session of A's. */
async function ownerBehindProxy(t: TestContext, tag: string) {
  const proxy = new HoldingEngineProxy();
  await proxy.start();
  t.after(async () => {
    await cleanUp();
    await proxy.stop();
  });
  const [a, b] = await Promise.all([replica(`${tag}a`, ['--docker-host', proxy.dockerHost]), replica(`${tag}b`)]);
  return { proxy, a, b, id: await newSession(a) };
}

test('a session DELETE whose owner dies after carrying it out answers 204', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  const { proxy, a, b, id } = await ownerBehindProxy(t, 'd');

  // The owner's delete removes the container, then lists the session's quota slot to free it
  // (session-removal.ts, before the DELETE answers): that listing is held, so the owner has
  // carried the delete out and not answered when it is killed.
  const held = proxy.hold(new RegExp(`quota-session%3D${id}`));
  const del = requestJson<{ code?: string }>(`${b.http}/v1/sessions/${id}`, 'DELETE');
  const reached = await settled(held, 30_000);
  assert.notEqual(reached, 'pending', "the owner never freed the deleted session's quota slot");
  await a.kill();
  const left = await docker('ps', '-aq', '--filter', `label=exec-server.session-id=${id}`);
  assert.equal(left.trim(), '', 'the owner removed the container before it was killed');

  const answer = await settled(del, 30_000);
  assert.ok(answer !== 'pending' && 'value' in answer, `the DELETE through B: ${JSON.stringify(answer)}`);
  assert.equal(answer.value.status, 204, `a delete that was carried out: ${JSON.stringify(answer.value.body)}`);
  const gone = await requestJson<{ code?: string }>(`${b.http}/v1/sessions/${id}`, 'GET');
  assert.equal(gone.status, 404, JSON.stringify(gone.body));
});

test('a DELETE of a snapshot whose owner dies after carrying it out answers 204', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  const { proxy, a, b, id } = await ownerBehindProxy(t, 's');
  const snap = await requestJson<{ snapshotId: string }>(`${a.http}/v1/sessions/${id}/snapshots`, 'POST', {});
  assert.equal(snap.status, 201, JSON.stringify(snap.body));
  const snapshotId = snap.body.snapshotId;
  t.after(() => docker('rmi', '-f', snapshotId).catch(() => undefined));

  // The engine removes the image; its answer never reaches the owner, which is killed then.
  const hex = snapshotId.replace(/^sha256:/, '');
  const held = proxy.hold(new RegExp(`^DELETE [^ ]*/images/(sha256(:|%3A))?${hex}`, 'm'), { pass: true });
  const del = requestJson<{ code?: string }>(
    `${b.http}/v1/sessions/${id}/snapshots/${encodeURIComponent(snapshotId)}`,
    'DELETE',
  );
  const reached = await settled(held, 30_000);
  assert.notEqual(reached, 'pending', "the owner never asked the engine to remove the snapshot's image");
  const gone = async (): Promise<boolean> => (await docker('images', '-q', '--no-trunc')).includes(hex) === false;
  for (const end = Date.now() + 10_000; !(await gone()) && Date.now() < end; ) await sleep(100);
  assert.ok(await gone(), 'the engine removed the image');
  await a.kill();

  const answer = await settled(del, 30_000);
  assert.ok(answer !== 'pending' && 'value' in answer, `the DELETE through B: ${JSON.stringify(answer)}`);
  // Sent again to B, which took the session over: the snapshot is gone, as asked.
  assert.equal(answer.value.status, 204, `a delete that was carried out: ${JSON.stringify(answer.value.body)}`);
  assert.match(b.stderr(), tookOver(id));
  const after = await requestJson<{ code?: string }>(
    `${b.http}/v1/sessions/${id}/snapshots/${encodeURIComponent(snapshotId)}`,
    'DELETE',
  );
  assert.equal(after.status, 404, `a snapshot that is gone, asked once: ${JSON.stringify(after.body)}`);
});
