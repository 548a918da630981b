/**
 * The SDK when its connection is gone: open handles' `wait()` rejects with a typed error once
 * nothing will resume the session (and a later `reconnect()` resumes them), and a connect to
 * a server that never upgrades, or never answers `initialize`, fails within its bound.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import { WebSocketServer } from 'ws';
import { DEFAULT_CONNECT_TIMEOUT_MS, ExecServerClient, ExecServerConnectionError } from '../../src/index.ts';
import { startServer, until, within } from '../support/harness.ts';

function listen(server: net.Server, port = 0): Promise<number> {
  return new Promise((resolve) => {
    server.listen(port, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port));
  });
}

/** A TCP relay to `target` that can vanish (a dead server, to the client) and come back on its port. */
async function relay(target: number): Promise<{ port: number; kill(): Promise<void>; revive(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const make = (): net.Server =>
    net.createServer((down) => {
      const up = net.connect(target, '127.0.0.1');
      for (const s of [down, up]) {
        sockets.add(s);
        s.on('error', () => undefined);
        s.on('close', () => sockets.delete(s));
      }
      down.pipe(up).pipe(down);
    });
  let server = make();
  const port = await listen(server);
  return {
    port,
    kill: async () => {
      await new Promise((r) => {
        server.close(r);
        for (const s of sockets) s.destroy();
      });
    },
    revive: async () => {
      server = make();
      await listen(server, port);
    },
  };
}

const isConnectionError = (err: unknown): boolean => err instanceof ExecServerConnectionError;

test('SDK: wait() rejects with ExecServerConnectionError once the connection is gone for good', {
  timeout: 90_000,
}, async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const net1 = await relay(Number(new URL(server.httpUrl).port));
  t.after(() => net1.kill());
  const client = await ExecServerClient.connect(`ws://127.0.0.1:${net1.port}`, {
    autoReconnect: { attempts: 3, delayMs: 50 },
  });
  t.after(() => client.http.deleteSession(client.sessionId).catch(() => undefined));

  // The server vanishes and the automatic resume runs out of attempts.
  const p = await client.exec(['sh', '-c', 'echo started; sleep 2; echo finished']);
  let seen = '';
  p.onOutput((c) => (seen += c.text));
  await until(() => seen === 'started\n', 5000, 'first output');
  const pending = p.wait();
  await net1.kill();
  await assert.rejects(within(pending, 10_000, 'wait() once the retries ran out'), isConnectionError);
  await assert.rejects(within(p.wait(), 1000, 'a wait() after'), isConnectionError);
  // It comes back: a reconnect resumes the handle, whose output is whole.
  await net1.revive();
  await within(client.reconnect(), 10_000, 'reconnect');
  assert.equal((await within(p.wait(), 10_000, 'wait() after the resume')).stdout, 'started\nfinished\n');

  // `disconnect()`: nothing resumes the connection either.
  const q = await client.exec(['sleep', '30'], { check: false });
  const waiting = q.wait();
  await client.disconnect();
  await assert.rejects(within(waiting, 5000, 'wait() after disconnect()'), isConnectionError);
  await client.reconnect();
  await q.kill();
  assert.equal((await within(q.wait(), 10_000, 'wait() after reconnect()')).terminal, 'terminated');

  // Without autoReconnect, a drop is the end.
  const plain = await ExecServerClient.connect(server.url);
  t.after(() => plain.deleteSession().catch(() => undefined));
  const r = await plain.exec(['sleep', '30']);
  const waited = r.wait();
  plain.connection.socket.terminate();
  await assert.rejects(within(waited, 5000, 'wait() after a drop'), isConnectionError);
});

test('SDK: connect fails within connectTimeoutMs when the server never upgrades or never answers', {
  timeout: 60_000,
}, async (t) => {
  assert.equal(DEFAULT_CONNECT_TIMEOUT_MS, 30_000);
  // Accepts the TCP connection, reads, never answers (a stuck proxy).
  const held = new Set<net.Socket>();
  const mute = net.createServer((s) => held.add(s.on('data', () => undefined)));
  const mutePort = await listen(mute);
  t.after(() => {
    for (const s of held) s.destroy();
    return new Promise((r) => mute.close(r));
  });
  const t0 = Date.now();
  await assert.rejects(
    within(ExecServerClient.connect(`ws://127.0.0.1:${mutePort}`, { connectTimeoutMs: 500 }), 10_000, 'connect'),
    (err: unknown) => isConnectionError(err) && /no WebSocket upgrade/.test((err as Error).message),
  );
  assert.ok(Date.now() - t0 < 5000);

  // Upgrades, then never answers `initialize`.
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((r) => wss.once('listening', r));
  t.after(() => {
    for (const c of wss.clients) c.terminate();
    return new Promise((r) => wss.close(r));
  });
  const wsPort = (wss.address() as net.AddressInfo).port;
  await assert.rejects(
    within(ExecServerClient.connect(`ws://127.0.0.1:${wsPort}`, { connectTimeoutMs: 500 }), 10_000, 'connect'),
    (err: unknown) => isConnectionError(err) && /no answer to initialize/.test((err as Error).message),
  );
  await until(() => wss.clients.size === 0, 5000, 'the timed-out socket closed');

  // A server that answers is unaffected.
  const server = await startServer();
  t.after(() => server.close());
  const client = await ExecServerClient.connect(server.url, { connectTimeoutMs: 5000 });
  t.after(() => client.deleteSession().catch(() => undefined));
  assert.equal((await (await client.exec(['echo', 'ok'])).wait()).stdout, 'ok\n');
  await assert.rejects(ExecServerClient.connect(server.url, { connectTimeoutMs: -1 }), TypeError);
});
