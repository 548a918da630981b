/**
 * The egress proxy's request heads (src/egress/request-head.ts, proxy.ts): where a head ends
 * (CRLF or bare LF), its size limit however it arrives, what is refused rather than forwarded,
 * the Host a forwarded request carries, and the bound on heads being read (a slow head gives its
 * place up; docs/architecture.md, "Egress"). Over real sockets on 127.0.0.1, to an origin of
 * the test's own on 127.0.0.2.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer as createHttp } from 'node:http';
import { type AddressInfo, createServer, connect, type Socket } from 'node:net';
import { type TestContext, test } from 'node:test';
import { parseAllowList } from '../../src/egress/allow-list.ts';
import { EgressProxy, type EgressRecord } from '../../src/egress/proxy.ts';
import { headEnd, parseRequestHead } from '../../src/egress/request-head.ts';

/** A connected socket pair: [the proxy's end, the client's end (half-open, as an agent's tunnel)]. */
async function pair(): Promise<[Socket, Socket]> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const accepted = new Promise<Socket>((r) => server.once('connection', r));
  const port = (server.address() as AddressInfo).port;
  const client = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
  const s = await accepted;
  server.close();
  return [s, client];
}

/** What the client reads until the proxy's answer is complete (its end) or `ms` passed. */
async function read(client: Socket, ms = 3000): Promise<string> {
  const chunks: Buffer[] = [];
  client.on('data', (d: Buffer) => chunks.push(d));
  await Promise.race([once(client, 'end'), new Promise((r) => setTimeout(r, ms))]);
  return Buffer.concat(chunks).toString('latin1');
}

/** Sends `request` on a new tunnel of `proxy`; what the client read back. */
async function exchangeWith(proxy: EgressProxy, request: string): Promise<string> {
  const [inner, client] = await pair();
  proxy.handle(inner);
  client.write(request);
  const got = await read(client);
  client.destroy();
  return got;
}

/** An HTTP server on 127.0.0.2 that says what it was asked; its port. */
async function origin(t: TestContext): Promise<number> {
  const server = createHttp((req, res) => res.end(`origin saw ${req.url} host=${req.headers.host}`));
  await new Promise<void>((r) => server.listen(0, '127.0.0.2', r));
  t.after(() => server.closeAllConnections());
  t.after(() => server.close());
  return (server.address() as AddressInfo).port;
}

test('request heads: bare LF ends lines; what the destination could read two ways is refused', () => {
  for (const head of ['CONNECT a:1 HTTP/1.1\r\nHost: a\r\n\r\n', 'CONNECT a:1 HTTP/1.1\nHost: a\n\n', 'X\n\r\n'])
    assert.equal(headEnd(Buffer.from(`${head}rest`)), head.length, JSON.stringify(head));
  assert.equal(headEnd(Buffer.from('CONNECT a:1 HTTP/1.1\r\nHost: a\r\n')), -1);
  assert.equal(headEnd(Buffer.from('CONNECT a:1 HTTP/1.1\r\n\r')), -1);
  assert.deepEqual(parseRequestHead('CONNECT a.test:443 HTTP/1.1\nHost: a.test\n\n'), {
    method: 'CONNECT',
    host: 'a.test',
    port: 443,
  });
  for (const [head, why] of [
    ['GET http://a.test/ HTTP/1.1\r\nX: a\rb\r\n\r\n', /bare CR/],
    ['GET http://a.test/ HTTP/1.1\r\nX: a\r\n  folded\r\n\r\n', /folded/],
    ['GET http://a.test/ HTTP/1.1\r\nHost : evil.test\r\n\r\n', /malformed header line/],
    ['GET http://a.test/ HTTP/1.1\r\nno colon\r\n\r\n', /malformed header line/],
    ['GET http://a.test/ HTTP/1.1 \r\n\r\n', /not an HTTP/],
    ['GET http://user@a.test/ HTTP/1.1\r\n\r\n', /not host\[:port\]/],
    ['CONNECT user@a.test:443 HTTP/1.1\r\n\r\n', /not host:port/],
  ] as const)
    assert.match(String(parseRequestHead(head)), why, JSON.stringify(head));
});

test('request heads: an absolute-form request carries the Host of its target, not the client’s', () => {
  const got = parseRequestHead(
    'GET http://Allowed.test:8080/p HTTP/1.1\nHost: other.test\nhost: third.test\nAccept: */*\n\n',
  );
  assert.ok(typeof got !== 'string');
  assert.equal(
    got.head?.toString(),
    'GET /p HTTP/1.1\r\nHost: allowed.test:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n',
  );
  const none = parseRequestHead('GET http://allowed.test/ HTTP/1.0\r\n\r\n');
  assert.ok(typeof none !== 'string');
  assert.match(String(none.head), /^GET \/ HTTP\/1\.0\r\nHost: allowed\.test\r\n/);
});

test('proxy: the head limit holds however the head arrives; bare LF is answered at once; Host is the target’s', async (t) => {
  const port = await origin(t);
  const proxy = new EgressProxy({ allow: parseAllowList([`127.0.0.2:${port}`]), maxConnections: 4 });
  t.after(() => proxy.close());
  const exchange = (request: string): Promise<string> => exchangeWith(proxy, request);
  // 20 KB in one segment: complete, but over 16 KiB.
  const big = await exchange(`CONNECT 127.0.0.2:${port} HTTP/1.1\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
  assert.match(big, /^HTTP\/1\.1 431 [\s\S]*larger than 16384 bytes/);
  const started = performance.now();
  const lf = await exchange(`GET http://127.0.0.2:${port}/lf HTTP/1.1\nHost: other.test\n\n`);
  assert.ok(performance.now() - started < 2000, 'answered at once, not at the head deadline');
  assert.match(lf, /^HTTP\/1\.1 200 OK/);
  assert.match(lf, new RegExp(`origin saw /lf host=127\\.0\\.0\\.2:${port}$`));
});

test('proxy: an answered tunnel is closed by the proxy even when its client never ends', async (t) => {
  const proxy = new EgressProxy({ allow: parseAllowList(['127.0.0.2:1']), maxConnections: 4 });
  t.after(() => proxy.close());
  const [inner, client] = await pair();
  const closed = once(inner, 'close').then(() => true);
  proxy.handle(inner);
  client.write('CONNECT 127.0.0.3:1 HTTP/1.1\r\n\r\n');
  assert.match(await read(client), /^HTTP\/1\.1 403 /);
  // The client (like an agent relaying a command that holds its socket) has not ended its side.
  assert.equal(await Promise.race([closed, new Promise((r) => setTimeout(r, 1000))]), true, 'the proxy closed its end');
  client.destroy();
});

test('proxy: past the connection limit the refusal is a 429 that is recorded', async (t) => {
  const port = await origin(t);
  const records: EgressRecord[] = [];
  const proxy = new EgressProxy({
    allow: parseAllowList([`127.0.0.2:${port}`]),
    maxConnections: 1,
    onRecord: (r) => records.push(r),
  });
  t.after(() => proxy.close());
  const [inner, held] = await pair();
  proxy.handle(inner);
  held.write(`CONNECT 127.0.0.2:${port} HTTP/1.1\r\n\r\n`);
  await once(held, 'data');
  const [inner2, second] = await pair();
  proxy.handle(inner2);
  second.write(`CONNECT 127.0.0.2:${port} HTTP/1.1\r\n\r\n`);
  assert.match(await read(second), /^HTTP\/1\.1 429 [\s\S]*1 connections already open/);
  assert.deepEqual(
    records.map((r) => [r.host, r.port, r.allowed, r.reason]),
    [['127.0.0.2', port, false, '1 connections already open']],
  );
  assert.equal(proxy.counts.refused, 1);
  second.destroy();
  held.destroy();
});

test('proxy: heads being read are bounded; a slow one gives its place up, so a prompt one gets through', async (t) => {
  const port = await origin(t);
  const proxy = new EgressProxy({
    allow: parseAllowList([`127.0.0.2:${port}`]),
    maxConnections: 8,
    maxHeads: 2,
    headYieldMs: 300,
    headTimeoutMs: 5000,
  });
  t.after(() => proxy.close());
  const slow: Socket[] = [];
  for (let i = 0; i < 2; i++) {
    const [inner, client] = await pair();
    proxy.handle(inner);
    client.write(`CONNECT 127.0.0.2:${port} HTTP/1.1\r\n`);
    slow.push(client);
  }
  const oldest = read(slow[0] as Socket);
  // At once: both places are young, the newcomer is refused.
  const [inner3, third] = await pair();
  proxy.handle(inner3);
  assert.match(await read(third), /^HTTP\/1\.1 429 [\s\S]*2 request heads already in progress/);
  await new Promise((r) => setTimeout(r, 350));
  const [inner4, prompt] = await pair();
  proxy.handle(inner4);
  prompt.write(`CONNECT 127.0.0.2:${port} HTTP/1.1\r\n\r\n`);
  const [answer] = (await once(prompt, 'data')) as [Buffer];
  assert.match(answer.toString(), /^HTTP\/1\.1 200 Connection Established/);
  assert.match(await oldest, /^HTTP\/1\.1 408 [\s\S]*not complete after 300 ms/);
  for (const s of [...slow, third, prompt]) s.destroy();
});

test('proxy: a head not complete within the deadline is answered 408', async (t) => {
  const proxy = new EgressProxy({ allow: parseAllowList(['*']), maxConnections: 4, headTimeoutMs: 200 });
  t.after(() => proxy.close());
  const [inner, client] = await pair();
  proxy.handle(inner);
  client.write('CONNECT 127.0.0.2:1 HTTP/1.1\r\n');
  assert.match(await read(client), /^HTTP\/1\.1 408 [\s\S]*within 200 ms/);
  client.destroy();
});

test('request heads: the fields a Connection field names stay with this hop (RFC 9110 §7.6.1)', () => {
  const got = parseRequestHead(
    'POST http://a.test/p HTTP/1.1\r\nConnection: keep-alive, X-Hop ,content-length\r\nconnection: x-other\r\n' +
      'X-Hop: secret\r\nX-Other: 1\r\nX-Kept: 2\r\nContent-Length: 3\r\n\r\n',
  );
  assert.ok(typeof got !== 'string');
  // The body goes on as it is, so its framing (Content-Length) stays whatever is listed.
  assert.equal(
    got.head?.toString(),
    'POST /p HTTP/1.1\r\nHost: a.test\r\nX-Kept: 2\r\nContent-Length: 3\r\nConnection: close\r\n\r\n',
  );
});

test('proxy: connections answered before their destination is known are counted and recorded', async (t) => {
  const records: EgressRecord[] = [];
  const proxy = new EgressProxy({
    allow: parseAllowList(['*']),
    maxConnections: 4,
    headTimeoutMs: 200,
    onRecord: (r) => records.push(r),
    resolve: async () => {
      throw new Error('no such name');
    },
  });
  t.after(() => proxy.close());
  const exchange = (request: string): Promise<string> => exchangeWith(proxy, request);
  assert.match(await exchange(`CONNECT a:1 HTTP/1.1\r\nX: ${'a'.repeat(20_000)}\r\n\r\n`), /^HTTP\/1\.1 431 /);
  assert.match(await exchange('NOT HTTP\r\n\r\n'), /^HTTP\/1\.1 400 /);
  assert.match(await exchange('CONNECT a:1 HTTP/1.1\r\n'), /^HTTP\/1\.1 408 /);
  assert.match(await exchange('CONNECT nowhere.test:443 HTTP/1.1\r\n\r\n'), /^HTTP\/1\.1 502 [\s\S]*cannot resolve/);
  assert.equal(proxy.counts.refused, 4);
  assert.deepEqual(
    records.map((r) => [r.host, r.port, r.method, r.allowed]),
    [
      [null, null, null, false],
      [null, null, null, false],
      [null, null, null, false],
      ['nowhere.test', 443, 'CONNECT', false],
    ],
  );
  assert.match(records[0]?.reason ?? '', /larger than 16384 bytes/);
  assert.match(records[1]?.reason ?? '', /not an HTTP\/1\.x request/);
  assert.match(records[2]?.reason ?? '', /no complete request head within 200 ms/);
  assert.match(records[3]?.reason ?? '', /cannot resolve nowhere\.test: no such name/);
});
