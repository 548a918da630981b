/**
 * Two edges of forwarding in a fleet, with real replicas on the real engine: a WebSocket relayed
 * to an owner paused with SIGSTOP (it accepts the connection and keeps its lease, but never
 * answers the upgrade), and a session's DELETE forwarded to an owner that carries it out and is
 * SIGKILLed before it answers.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { RpcConnection, RpcError } from '../../src/client/rpc-connection.ts';
import { requestJson } from '../http/helpers.ts';
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

async function createSession(r: Replica): Promise<string> {
  const made = await requestJson<{ sessionId: string }>(`${r.http}/v1/sessions`, 'POST', {
    sandbox: { type: 'danger-full-access' },
    approvalPolicy: 'never',
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  return made.body.sessionId;
}

test('a WebSocket relayed to a paused owner fails in about 10 s; an open relay, idle, stays', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  t.after(cleanUp);
  const [a, b] = await Promise.all([replica('wa'), replica('wb')]);
  const id = await createSession(a);
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

/**
 * A unix-socket proxy to the engine for one replica: it passes everything, except that the
 * first request naming `holdPattern` (and whatever follows it on that connection) is held,
 * never passed on nor answered, so the replica waits there.
 */
class HoldingEngineProxy {
  readonly path = join(tmpdir(), `${instanceId}.sock`);
  readonly #sockets = new Set<Socket>();
  #server: Server | undefined;
  #pattern: string | undefined;
  #onHeld: (() => void) | undefined;

  get dockerHost(): string {
    return `unix://${this.path}`;
  }

  /** Resolves once a request naming `pattern` arrived (and is held). */
  hold(pattern: string): Promise<void> {
    this.#pattern = pattern;
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
      client.on('data', (chunk: Buffer) => {
        if (!held && this.#pattern !== undefined && chunk.toString('latin1').includes(this.#pattern)) {
          held = true;
          this.#pattern = undefined;
          this.#onHeld?.();
        }
        if (!held) upstream.write(chunk);
      });
      upstream.pipe(client);
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

test('a session DELETE whose owner dies after carrying it out answers 204', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  const proxy = new HoldingEngineProxy();
  await proxy.start();
  t.after(async () => {
    await cleanUp();
    await proxy.stop();
  });
  const [a, b] = await Promise.all([replica('da', ['--docker-host', proxy.dockerHost]), replica('db')]);
  const id = await createSession(a);

  // The owner's delete removes the container, then lists the session's quota slot to free it
  // (session-removal.ts, before the DELETE answers): that listing is held, so the owner has
  // carried the delete out and not answered when it is killed.
  const held = proxy.hold(`quota-session%3D${id}`);
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
