/**
 * The server's egress proxy (src/egress/proxy.ts) on its own, over a socket pair: request heads
 * parsed and rewritten, refusals answered 403 before anything is dialled, a name resolved once
 * and the checked address dialled, the connection bound. The only destination is a server of
 * the test's own on 127.0.0.2.
 */
import assert from 'node:assert/strict';
import { createServer as createHttp } from 'node:http';
import { type AddressInfo, createServer, connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { parseAllowList } from '../../src/egress/allow-list.ts';
import { EgressProxy, parseRequestHead, splitAuthority, type EgressRecord } from '../../src/egress/proxy.ts';
import { egressEnvironment } from '../../src/egress/session-egress.ts';

test('request heads: CONNECT, absolute URIs rewritten to origin form with Connection: close', () => {
  assert.deepEqual(parseRequestHead('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n'), {
    method: 'CONNECT',
    host: 'example.com',
    port: 443,
  });
  assert.deepEqual(splitAuthority('[::1]:8080', undefined), { host: '::1', port: 8080 });
  assert.equal(splitAuthority('example.com', undefined), undefined);
  const get = parseRequestHead(
    'GET http://Example.com/a?b=1 HTTP/1.1\r\nHost: example.com\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: x\r\nAccept: */*\r\n',
  );
  assert.ok(typeof get !== 'string');
  assert.equal(get.host, 'example.com');
  assert.equal(get.port, 80);
  assert.equal(
    get.head?.toString(),
    'GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nConnection: close\r\n\r\n',
  );
  assert.match(String(parseRequestHead('GET https://example.com/ HTTP/1.1\r\n')), /use CONNECT/);
  assert.match(String(parseRequestHead('GET / HTTP/1.1\r\n')), /absolute/);
  assert.match(String(parseRequestHead('hello\r\n')), /not an HTTP/);
});

test('the environment names the proxy in every spelling and keeps 127.0.0.1 inside', () => {
  const env = egressEnvironment(3128);
  for (const name of ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'http_proxy', 'https_proxy', 'all_proxy'])
    assert.equal(env[name], 'http://127.0.0.1:3128', name);
  assert.equal(env['NO_PROXY'], 'localhost,127.0.0.1');
  assert.equal(env['no_proxy'], 'localhost,127.0.0.1');
});

/** A connected socket pair on 127.0.0.1: [the proxy's end, the client's end]. */
async function pair(): Promise<[Socket, Socket]> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const accepted = new Promise<Socket>((r) => server.once('connection', r));
  const client = connect((server.address() as AddressInfo).port, '127.0.0.1');
  const s = await accepted;
  server.close();
  return [s, client];
}

async function exchange(proxy: EgressProxy, request: string): Promise<string> {
  const [inner, client] = await pair();
  proxy.handle(inner);
  client.write(request);
  const chunks: Buffer[] = [];
  client.on('data', (d: Buffer) => chunks.push(d));
  await new Promise((r) => client.once('close', r));
  return Buffer.concat(chunks).toString();
}

test('proxy: relays an allowed request, refuses others with 403 without dialling, resolves once', async (t) => {
  let served = 0;
  const origin = createHttp((req, res) => {
    served++;
    res.end(`origin saw ${req.method} ${req.url} host=${req.headers.host} connection=${req.headers.connection}`);
  });
  await new Promise<void>((r) => origin.listen(0, '127.0.0.2', r));
  t.after(() => origin.close());
  const port = (origin.address() as AddressInfo).port;
  const records: EgressRecord[] = [];
  const lookups: string[] = [];
  const proxy = new EgressProxy({
    allow: parseAllowList([`127.0.0.2:${port}`, 'named.test', '*.example.test']),
    maxConnections: 4,
    onRecord: (r) => records.push(r),
    // A fake resolver: every name of this test maps to a loopback address.
    resolve: async (host) => {
      lookups.push(host);
      return host === 'named.test' ? ['127.0.0.1'] : ['127.0.0.3'];
    },
  });
  const ok = await exchange(proxy, `GET http://127.0.0.2:${port}/x HTTP/1.1\r\nHost: 127.0.0.2:${port}\r\n\r\n`);
  assert.match(ok, /^HTTP\/1\.1 200 OK/);
  assert.match(ok, new RegExp(`origin saw GET /x host=127.0.0.2:${port} connection=close`));
  // A name the list allows but that resolves to loopback: refused (only an ip/cidr entry names it).
  const named = await exchange(proxy, `GET http://named.test:${port}/ HTTP/1.1\r\n\r\n`);
  assert.match(named, /^HTTP\/1\.1 403 Forbidden[\s\S]*refused: 127\.0\.0\.1 is a loopback address/);
  const other = await exchange(proxy, 'CONNECT 127.0.0.2:1 HTTP/1.1\r\n\r\n');
  assert.match(other, /^HTTP\/1\.1 403 Forbidden/);
  const unlisted = await exchange(proxy, 'CONNECT unlisted.test:443 HTTP/1.1\r\n\r\n');
  assert.match(unlisted, /^HTTP\/1\.1 403 Forbidden[\s\S]*not in the session's allow-list/);
  assert.deepEqual(lookups, ['named.test'], 'a name no entry matches is never looked up');
  const bad = await exchange(proxy, 'GET / HTTP/1.1\r\n\r\n');
  assert.match(bad, /^HTTP\/1\.1 400 Bad Request/);
  assert.equal(served, 1);
  // A relayed connection is recorded when its relay reports, possibly after later refusals.
  while (proxy.counts.active > 0) await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(
    records.map((r) => [r.host, r.allowed]).sort((a, b) => Number(b[1]) - Number(a[1])),
    [
      ['127.0.0.2', true],
      ['named.test', false],
      ['127.0.0.2', false],
      ['unlisted.test', false],
      // The malformed head: refused before it named a destination.
      [null, false],
    ],
  );
  assert.equal(proxy.counts.connections, 1);
  assert.equal(proxy.counts.refused, 4);
  assert.equal(proxy.counts.active, 0);
  assert.ok(proxy.counts.bytesIn > 0 && proxy.counts.bytesOut > 0);
});

test('proxy: connections beyond the bound are answered 429', async (t) => {
  const origin = createServer((s) => s.on('data', () => undefined));
  await new Promise<void>((r) => origin.listen(0, '127.0.0.2', r));
  t.after(() => origin.close());
  const port = (origin.address() as AddressInfo).port;
  const proxy = new EgressProxy({ allow: parseAllowList([`127.0.0.2:${port}`]), maxConnections: 1 });
  t.after(() => proxy.close());
  const [inner, held] = await pair();
  proxy.handle(inner);
  held.write(`CONNECT 127.0.0.2:${port} HTTP/1.1\r\n\r\n`);
  await new Promise((r) => held.once('data', r));
  assert.equal(proxy.counts.active, 1);
  const second = await exchange(proxy, `CONNECT 127.0.0.2:${port} HTTP/1.1\r\n\r\n`);
  assert.match(second, /^HTTP\/1\.1 429 /);
  held.destroy();
});

test('proxy: the native relay counts what it relayed, and close() ends a connection it holds', async (t) => {
  // The origin sends 300000 bytes at once and then holds the connection open.
  let received = 0;
  const origin = createServer((s) => {
    s.on('data', (d: Buffer) => {
      received += d.length;
    });
    s.on('error', () => undefined);
    s.write(Buffer.alloc(300_000, 0x63));
  });
  await new Promise<void>((r) => origin.listen(0, '127.0.0.2', r));
  t.after(() => origin.close());
  const port = (origin.address() as AddressInfo).port;
  const records: EgressRecord[] = [];
  const proxy = new EgressProxy({
    allow: parseAllowList([`127.0.0.2:${port}`]),
    maxConnections: 4,
    onRecord: (r) => records.push(r),
  });
  const [inner, client] = await pair();
  proxy.handle(inner);
  client.write(`CONNECT 127.0.0.2:${port} HTTP/1.1\r\n\r\nhello`);
  let got = 0;
  client.on('data', (d: Buffer) => {
    got += d.length;
  });
  const answer = 'HTTP/1.1 200 Connection Established\r\n\r\n'.length;
  while (got < answer + 300_000) await new Promise((r) => setTimeout(r, 10));
  assert.equal(records.length, 0, 'still open');
  const closed = new Promise((r) => client.once('close', r));
  proxy.close();
  await closed;
  while (records.length === 0) await new Promise((r) => setTimeout(r, 10));
  assert.equal(received, 5);
  assert.equal(records[0]?.bytesIn, 300_000);
  assert.equal(records[0]?.bytesOut, 5);
  assert.equal(proxy.counts.active, 0);
});
