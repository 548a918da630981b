/**
 * A session's egress (src/egress/session-egress.ts) when its relay process dies, without an
 * engine: the proxy is handed one end of a loopback TCP pair as its tunnel, so the native relay
 * relays that socket and the destination (a server of this test's own on 127.0.0.2). A connection
 * that streams is counted as it goes; `kill -9` of the relay ends it for the client, records it
 * with the bytes last reported and why, logs and counts the death, and the next connection gets
 * a new relay. test/docker/egress-relay-exit.test.ts does the same through a real container.
 */
import assert from 'node:assert/strict';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';
import { test } from 'node:test';
import { parseAllowList } from '../../src/egress/allow-list.ts';
import { RELAY_BINARY } from '../../src/egress/native-relay.ts';
import type { EgressRecord } from '../../src/egress/proxy.ts';
import { SessionEgress } from '../../src/egress/session-egress.ts';
import { Metrics } from '../../src/metrics.ts';
import { relaydPids } from '../support/relayd.ts';
import { until } from '../support/until.ts';

/** The proxy's end and the client's end of a loopback TCP connection (half-closable, as a tunnel is). */
async function pair(): Promise<[Socket, Socket]> {
  const server = createServer({ allowHalfOpen: true });
  await new Promise<void>((r) => server.listen(0, '127.0.0.2', r));
  const accepted = new Promise<Socket>((r) => server.once('connection', r));
  const client = connect((server.address() as AddressInfo).port, '127.0.0.2');
  const s = await accepted;
  server.close();
  return [s, client];
}

/**
 * The destination: `slow` first streams 64 KiB every 20 ms until the connection ends (the bytes
 * sent are counted); anything else is read to its end and answered `got N`.
 */
async function streamingOrigin(): Promise<{ server: Server; port: number; sent: number[] }> {
  const sent: number[] = [];
  const server = createServer((s: Socket) => {
    const me = sent.push(0) - 1;
    let got = 0;
    s.on('error', () => undefined);
    s.on('data', (d: Buffer) => {
      got += d.length;
      if (got !== d.length || !d.toString('latin1').startsWith('slow')) return;
      const timer = setInterval(() => {
        sent[me] = (sent[me] ?? 0) + 64 * 1024;
        s.write(Buffer.alloc(64 * 1024, 0x62));
      }, 20);
      s.once('close', () => clearInterval(timer));
    });
    s.on('end', () => s.end(`got ${got}\n`));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.2', r));
  return { server, port: (server.address() as AddressInfo).port, sent };
}

test('egress: a relay killed under a streaming connection keeps what it reported; the next gets a new relay', async (t) => {
  assert.ok(RELAY_BINARY, 'build/exec-agent is built (sh scripts/build-native.sh)');
  const { server: origin, port, sent } = await streamingOrigin();
  t.after(() => origin.close());
  const records: EgressRecord[] = [];
  const warnings: Array<Record<string, unknown>> = [];
  const metrics = new Metrics();
  const allow = [`127.0.0.2:${port}`];
  const egress = new SessionEgress({
    allow,
    entries: parseAllowList(allow),
    metrics,
    log: { warn: (obj) => warnings.push(obj as Record<string, unknown>) },
    onRecord: (r) => records.push(r),
  });
  t.after(() => egress.close());
  const answer = 'HTTP/1.1 200 Connection Established\r\n\r\n';
  const started = new Set(relaydPids());

  const [inner, client] = await pair();
  egress.proxy.handle(inner);
  client.on('error', () => undefined);
  let read = 0;
  client.on('data', (d: Buffer) => {
    read += d.length;
  });
  client.write(`CONNECT 127.0.0.2:${port} HTTP/1.1\r\n\r\nslow`);
  const closed = new Promise((r) => client.once('close', r));
  await until('counted while it streams', () => egress.counts.bytesIn > 512 * 1024);
  assert.equal(records.length, 0, 'still open');
  const [pid, ...others] = relaydPids().filter((p) => !started.has(p));
  assert.ok(pid !== undefined && others.length === 0, 'one relay process for the session');

  process.kill(pid, 'SIGKILL');
  const counted = egress.counts.bytesIn;
  await Promise.race([closed, until('the client sees its connection end', () => false, 5000)]);
  assert.ok(read > answer.length && read <= (sent[0] ?? 0) + answer.length, `a part of the stream arrived: ${read}`);
  await until('the connection is recorded', () => records.length === 1);
  const [cut] = records;
  assert.match(cut?.reason ?? '', /^the egress relay process ended \(signal SIGKILL\): bytes as last reported$/);
  assert.ok((cut?.bytesIn ?? 0) >= counted && counted > 0);
  assert.ok((cut?.bytesIn ?? 0) <= (sent[0] ?? 0), 'never more than the destination sent');
  assert.equal(cut?.bytesOut, 'slow'.length);
  assert.equal(egress.counts.active, 0);
  assert.deepEqual(
    { pid: warnings[0]?.['relayPid'], signal: warnings[0]?.['signal'], open: warnings[0]?.['openConnections'] },
    { pid, signal: 'SIGKILL', open: 1 },
  );
  assert.match(await metrics.registry.metrics(), /^exec_server_egress_relay_exits_total 1$/m);

  // The next connection starts another relay and is counted exactly.
  const [inner2, client2] = await pair();
  egress.proxy.handle(inner2);
  client2.end(`CONNECT 127.0.0.2:${port} HTTP/1.1\r\n\r\nhello`);
  let text = '';
  client2.on('data', (d: Buffer) => {
    text += d.toString('latin1');
  });
  await new Promise((r) => client2.once('close', r));
  await until('the next connection is recorded', () => records.length === 2);
  assert.equal(text, `${answer}got 5\n`, JSON.stringify(records[1]));
  assert.deepEqual([records[1]?.reason, records[1]?.bytesOut, records[1]?.bytesIn], [undefined, 5, 6]);
  const fresh = relaydPids().filter((p) => !started.has(p));
  assert.ok(fresh.length === 1 && fresh[0] !== pid, 'a new relay process');
  assert.equal(warnings.length, 1);
});
