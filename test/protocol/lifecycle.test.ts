/** Connection lifecycle, framing and error paths of the JSON-RPC protocol, over a real WebSocket. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import WebSocket from 'ws';
import { RpcConnection, type RpcError } from '../../src/client/rpc-connection.ts';
import { BACKENDS } from '../support/backends.ts';
import { startServer, TestSession, sleep } from '../support/harness.ts';

/** Sends raw text frames and collects raw replies. */
async function rawSocket(
  url: string,
): Promise<{ ws: WebSocket; next(): Promise<Record<string, unknown>>; send(text: string): void }> {
  const ws = new WebSocket(url);
  const queue: Record<string, unknown>[] = [];
  const waiters: Array<(m: Record<string, unknown>) => void> = [];
  ws.on('message', (d) => {
    const m = JSON.parse(String(d)) as Record<string, unknown>;
    const w = waiters.shift();
    if (w) w(m);
    else queue.push(m);
  });
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  return {
    ws,
    send: (text) => ws.send(text),
    next: () => {
      const m = queue.shift();
      if (m) return Promise.resolve(m);
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error('no reply')), 10_000);
        waiters.push((msg) => {
          clearTimeout(t);
          resolve(msg);
        });
      });
    },
  };
}

for (const backend of BACKENDS) {
  describe(`lifecycle and framing [${backend}]`, { timeout: 120_000 }, () => {
    test('initialize answers sessionId and environmentInfo; jsonrpc echoed only when sent', async (t) => {
      const server = await startServer({ backend });
      t.after(() => server.close());
      const plain = await rawSocket(server.url);
      t.after(() => plain.ws.close());
      plain.send(JSON.stringify({ id: 1, method: 'initialize', params: { clientName: 'raw' } }));
      const r1 = await plain.next();
      assert.equal(r1['jsonrpc'], undefined);
      const result = r1['result'] as Record<string, unknown>;
      assert.match(String(result['sessionId']), /^[0-9a-f-]{36}$/);
      const env = result['environmentInfo'] as Record<string, unknown>;
      assert.ok((env['shell'] as Record<string, unknown>)['path']);
      assert.match(String(env['cwd']), /^file:\/\//);

      const tagged = await rawSocket(server.url);
      t.after(() => tagged.ws.close());
      tagged.send(JSON.stringify({ jsonrpc: '2.0', id: 'a', method: 'initialize', params: { clientName: 'raw' } }));
      const r2 = await tagged.next();
      assert.equal(r2['jsonrpc'], '2.0');
      assert.equal(r2['id'], 'a');
    });

    test('methods before initialize and before initialized fail clearly; a second initialize fails', async (t) => {
      const server = await startServer({ backend });
      t.after(() => server.close());
      const conn = await RpcConnection.open(server.url);
      t.after(() => conn.close());
      await assert.rejects(
        conn.request('process/list', {}),
        (e: RpcError) => e.code === 'EXEC_ERR_NOT_INITIALIZED' && /initialize before/.test(e.message),
      );
      await conn.request('initialize', { clientName: 't' });
      await assert.rejects(
        conn.request('process/list', {}),
        (e: RpcError) => e.code === 'EXEC_ERR_NOT_INITIALIZED' && /initialized/.test(e.message),
      );
      conn.notify('initialized', {});
      const list = await conn.request<{ processes: unknown[] }>('process/list', {});
      assert.deepEqual(list.processes, []);
      await assert.rejects(
        conn.request('initialize', { clientName: 't' }),
        (e: RpcError) => e.code === 'EXEC_ERR_ALREADY_INITIALIZED' && e.rpcCode === -32600,
      );
    });

    test('parse error keeps the connection; unknown method -32601; bad params -32602 naming the field', async (t) => {
      const server = await startServer({ backend });
      t.after(() => server.close());
      const raw = await rawSocket(server.url);
      t.after(() => raw.ws.close());
      raw.send('{not json');
      const parse = await raw.next();
      assert.equal(parse['id'], null);
      assert.equal((parse['error'] as Record<string, unknown>)['code'], -32700);
      raw.send(JSON.stringify({ id: 2, method: 'no/such', params: {} }));
      const unknown = (await raw.next())['error'] as Record<string, unknown>;
      assert.equal(unknown['code'], -32601);
      assert.equal((unknown['data'] as Record<string, unknown>)['code'], 'EXEC_ERR_METHOD_NOT_FOUND');
      raw.send(JSON.stringify({ id: 3, method: 'initialize', params: { clientName: 7 } }));
      const bad = (await raw.next())['error'] as Record<string, unknown>;
      assert.equal(bad['code'], -32602);
      assert.match(String(bad['message']), /clientName/);
      raw.send(JSON.stringify({ id: 4, method: 'initialize', params: {} }));
      const missing = (await raw.next())['error'] as Record<string, unknown>;
      assert.match(String(missing['message']), /missing field clientName/);
      raw.send(JSON.stringify({ id: 5, method: 'initialize', params: { clientName: 'ok' } }));
      assert.ok((await raw.next())['result']);
      raw.send(JSON.stringify({ method: 'initialized' }));
      raw.send(JSON.stringify({ id: 6, method: 'process/start', params: { processId: 'x', argv: [], tty: false } }));
      const empty = (await raw.next())['error'] as Record<string, unknown>;
      assert.equal(empty['code'], -32602);
      assert.match(String(empty['message']), /argv must not be empty/);
      raw.send(
        JSON.stringify({ id: 7, method: 'process/start', params: { processId: 'x', argv: ['true'], tty: 'yes' } }),
      );
      assert.match(String(((await raw.next())['error'] as Record<string, unknown>)['message']), /tty/);
      raw.send(
        JSON.stringify([
          { id: 8, method: 'process/list' },
          { id: 9, method: 'nope' },
        ]),
      );
      const batch = (await raw.next()) as unknown as Array<Record<string, unknown>>;
      assert.equal(batch.length, 2);
      raw.send(JSON.stringify([]));
      assert.equal(((await raw.next())['error'] as Record<string, unknown>)['code'], -32600);
      raw.ws.send(Buffer.from([1, 2, 3]), { binary: true });
      assert.match(String(((await raw.next())['error'] as Record<string, unknown>)['message']), /binary frames/);
      assert.equal(raw.ws.readyState, WebSocket.OPEN);
    });

    test('an oversized message closes the connection with 1009; the server stays up', async (t) => {
      const server = await startServer({ backend, flags: ['--max-message-bytes', '4096'] });
      t.after(() => server.close());
      const s = await TestSession.open(server.url);
      const closed = new Promise<number>((resolve) => s.conn.onClose((code) => resolve(code)));
      s.conn.socket.send(JSON.stringify({ id: 99, method: 'process/list', params: { pad: 'x'.repeat(10_000) } }));
      assert.equal(await closed, 1009);
      const again = await TestSession.open(server.url);
      t.after(() => again.close());
      assert.ok(again.sessionId);
    });

    test('resume reattaches the session, closes the older connection, and processes keep running', async (t) => {
      const server = await startServer({ backend });
      t.after(() => server.close());
      const first = await TestSession.open(server.url);
      // Long enough to outlive the resume on a loaded machine: a resumed connection hears only
      // what happens after it attached, so an exit before that would never reach `second`.
      await first.start('long', ['sh', '-c', 'sleep 3; echo done']);
      const evicted = new Promise<[number, string]>((resolve) =>
        first.conn.onClose((code, reason) => resolve([code, reason])),
      );
      const second = await TestSession.open(server.url, { resumeSessionId: first.sessionId });
      t.after(() => second.close());
      assert.equal(second.sessionId, first.sessionId);
      const [code, reason] = await evicted;
      assert.equal(code, 4000);
      assert.match(reason, /resumed by another connection/);
      const r = await second.result('long');
      assert.equal(r.exited['exitCode'], 0);
      const read = await second.request<Record<string, unknown>>('process/read', { processId: 'long', afterSeq: 0 });
      assert.equal(
        Buffer.from(String((read['chunks'] as Array<Record<string, unknown>>)[0]?.['chunk']), 'base64').toString(),
        'done\n',
      );
      await assert.rejects(
        TestSession.open(server.url, { resumeSessionId: '00000000-0000-0000-0000-000000000000' }),
        (e: RpcError) => e.code === 'EXEC_ERR_SESSION_NOT_FOUND',
      );
    });

    test('a disconnect never kills a process', async (t) => {
      const server = await startServer({ backend });
      t.after(() => server.close());
      const first = await TestSession.open(server.url);
      await first.start('p', ['sh', '-c', 'sleep 0.5; echo survived']);
      await first.close();
      await sleep(1000);
      const again = await TestSession.open(server.url, { resumeSessionId: first.sessionId });
      t.after(() => again.close());
      const read = await again.request<Record<string, unknown>>('process/read', {
        processId: 'p',
        afterSeq: 0,
        waitMs: 5000,
      });
      assert.equal(read['exitCode'], 0);
      assert.equal(
        Buffer.from(String((read['chunks'] as Array<Record<string, unknown>>)[0]?.['chunk']), 'base64').toString(),
        'survived\n',
      );
    });
  });
}

describe('authentication', () => {
  test('bearer token checked before the upgrade; health routes stay open', async (t) => {
    const server = await startServer({ flags: ['--token', 's3cret'] });
    t.after(() => server.close());
    await assert.rejects(RpcConnection.open(server.url), (e: Error & { statusCode?: number }) => e.statusCode === 401);
    await assert.rejects(
      RpcConnection.open(server.url, { token: 'wrong' }),
      (e: Error & { statusCode?: number }) => e.statusCode === 401,
    );
    const ok = await TestSession.open(server.url, {}, { token: 's3cret' });
    t.after(() => ok.close());
    assert.ok(ok.sessionId);
    assert.equal((await fetch(`${server.httpUrl}/healthz`)).status, 200);
    assert.equal((await fetch(`${server.httpUrl}/readyz`)).status, 200);
    const metrics = await fetch(`${server.httpUrl}/metrics`);
    assert.equal(metrics.status, 401);
    const authed = await fetch(`${server.httpUrl}/metrics`, { headers: { authorization: 'Bearer s3cret' } });
    assert.match(await authed.text(), /exec_server_sessions_active 1/);
  });
});

describe('bounds', () => {
  test('requests in flight per connection are bounded; the excess gets a clear error, the rest are answered', {
    timeout: 60_000,
  }, async (t) => {
    const server = await startServer();
    t.after(() => server.close());
    const s = await TestSession.open(server.url);
    t.after(() => s.close());
    await s.start('quiet', ['sleep', '30']);
    const polls = Array.from({ length: 1100 }, () =>
      s.request('process/read', { processId: 'quiet', afterSeq: 0, waitMs: 2000 }).then(
        () => 'ok',
        (e: RpcError) => e.code,
      ),
    );
    const results = await Promise.all(polls);
    assert.equal(results.filter((r) => r === 'ok').length, 1024);
    assert.equal(results.filter((r) => r === 'EXEC_ERR_BUSY').length, 76);
    await s.request('process/terminate', { processId: 'quiet' });
  });
});
