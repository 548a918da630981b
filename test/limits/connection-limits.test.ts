/**
 * The server's bounds on client connections (src/transport/connection-limits.ts): past
 * `--max-connections` a request is answered 429 `EXEC_ERR_BUSY` and its connection closed, and
 * past that and the spare Node drops connections unanswered; past `--max-websockets-per-tenant`
 * a tenant's upgrade is answered 429 while another tenant's goes on. Places come back when
 * connections close. Real server (local backend), raw sockets on loopback.
 */
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { RpcConnection } from '../../src/client/rpc-connection.ts';
import { startServer } from '../support/harness.ts';
import { requestJson } from '../http/helpers.ts';

const ACME = 'tenant-secret-acme';
const OTHER = 'tenant-secret-other';
const FLAGS = ['--tokens', `acme:${ACME},other:${OTHER}`];

/** Idle TCP connections to the server (they send nothing), each open once this resolves. */
async function idle(port: number, count: number): Promise<Socket[]> {
  return Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<Socket>((resolve, reject) => {
          const s = connect(port, '127.0.0.1', () => resolve(s));
          s.once('error', reject);
        }),
    ),
  );
}

/** Polls `f` until it returns true, for at most 10 s. */
async function eventually(what: string, f: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await f())) {
    if (Date.now() > deadline) throw new Error(`not within 10 s: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The error an upgrade refusal rejects with. */
async function refusal(url: string, token: string): Promise<{ statusCode?: number; code?: string }> {
  const err = await RpcConnection.open(url, { token }).then(
    (c) => {
      c.close();
      throw new Error('the upgrade was accepted');
    },
    (e: unknown) => e as { statusCode?: number; code?: string },
  );
  return err;
}

test('past --max-connections a request is answered 429 EXEC_ERR_BUSY, past the spare dropped; places come back', async (t) => {
  const server = await startServer({ flags: [...FLAGS, '--max-connections', '16'] });
  t.after(() => server.close());
  const port = Number(new URL(server.httpUrl).port);
  const held = await idle(port, 16);
  t.after(() => {
    for (const s of held) s.destroy();
  });
  const busy = await requestJson(`${server.httpUrl}/v1/sessions`, 'GET', undefined, ACME);
  assert.equal(busy.status, 429, JSON.stringify(busy.body));
  assert.equal(busy.body.code, 'EXEC_ERR_BUSY');
  assert.match(String(busy.body.message), /16 connections open \(--max-connections\)/);
  assert.equal(busy.headers.get('retry-after'), '1');
  // The upgrade of a WebSocket is refused the same way, before authentication.
  const ws = await refusal(server.url, 'not-a-token');
  assert.equal(ws.statusCode, 429);
  assert.equal(ws.code, 'EXEC_ERR_BUSY');
  // Past the spare, connections are closed unanswered: the server holds no more of them.
  const spare = await idle(port, 64);
  held.push(...spare);
  const dropped = await new Promise<string>((resolve) => {
    const s = connect(port, '127.0.0.1', () => s.write('GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n'));
    let got = '';
    s.on('data', (d) => {
      got += d.toString();
    });
    s.once('close', () => resolve(got));
    s.once('error', () => undefined);
  });
  assert.equal(dropped, '', 'a connection past the spare gets no answer');
  for (const s of held.splice(0)) s.destroy();
  // Until the server has seen those closes, a new connection may still be dropped or refused.
  await eventually('a request is served once the idle connections closed', async () => {
    const r = await requestJson(`${server.httpUrl}/v1/sessions`, 'GET', undefined, ACME).catch(() => undefined);
    return r?.status === 200;
  });
  const metrics = await requestJson<string>(`${server.httpUrl}/metrics`, 'GET', undefined, ACME);
  assert.match(String(metrics.body), /exec_server_connections_refused_total\{limit="server"\} [1-9]/);
});

test("past --max-websockets-per-tenant a tenant's upgrade is answered 429; another tenant's is not", async (t) => {
  const server = await startServer({ flags: [...FLAGS, '--max-websockets-per-tenant', '2'] });
  t.after(() => server.close());
  const first = await RpcConnection.open(server.url, { token: ACME });
  const second = await RpcConnection.open(server.url, { token: ACME });
  t.after(() => {
    first.close();
    second.close();
  });
  const third = await refusal(server.url, ACME);
  assert.equal(third.statusCode, 429);
  assert.equal(third.code, 'EXEC_ERR_BUSY');
  const other = await RpcConnection.open(server.url, { token: OTHER });
  other.close();
  // A plain GET of the WebSocket URL and the HTTP API hold no place.
  assert.equal((await requestJson(`${server.httpUrl}/v1/ws`, 'GET', undefined, ACME)).status, 200);
  assert.equal((await requestJson(`${server.httpUrl}/v1/sessions`, 'GET', undefined, ACME)).status, 200);
  first.close();
  await eventually("a closed connection gives its tenant's place back", async () => {
    const c = await RpcConnection.open(server.url, { token: ACME }).catch(() => undefined);
    c?.close();
    return c !== undefined;
  });
  const metrics = await requestJson<string>(`${server.httpUrl}/metrics`, 'GET', undefined, ACME);
  assert.match(String(metrics.body), /exec_server_connections_refused_total\{limit="tenant"\} [1-9]/);
});
