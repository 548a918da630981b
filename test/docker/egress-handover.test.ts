/**
 * Egress hand-over against a real engine (runc, agent link; docs/architecture.md, "Egress"): once
 * the proxy decided and connected, `exec-agent relay take` takes the command's socket from the
 * agent (EXAGTUN2) and splices it to the destination on the host. The bytes each way are counted
 * on the host, exactly as the destination saw them, including what crossed the tunnel before the
 * hand-over; a refusal is still a 403 from the proxy with nothing dialled. The destination is a
 * server of this test's own on 127.0.0.2 that counts what it receives and sends.
 */
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { type TestContext, test } from 'node:test';
import { parseAllowList } from '../../src/egress/allow-list.ts';
import type { EgressRecord } from '../../src/egress/proxy.ts';
import { EGRESS_PROXY_PORT, egressEnvironment, SessionEgress } from '../../src/egress/session-egress.ts';
import { dockerTestOptions } from './engine.ts';
import { makeBackend, runScript as run, sessionSpec } from './helpers.ts';
import { tempDirFor } from '../support/temp-dir.ts';

interface Seen {
  received: number;
  sent: number;
}

/**
 * A raw origin: `GET /N` answers N bytes of body (HTTP/1.0, then closes); anything else is read to
 * its end and answered `got N`, N the bytes received. Every connection's counts are kept.
 */
async function origin(): Promise<{ server: Server; port: number; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((s: Socket) => {
    const me: Seen = { received: 0, sent: 0 };
    seen.push(me);
    let head = '';
    const send = (b: Buffer | string): void => {
      me.sent += Buffer.byteLength(b);
      s.write(b);
    };
    s.on('data', (d: Buffer) => {
      me.received += d.length;
      if (head.length < 64) head += d.toString('latin1', 0, Math.min(d.length, 64));
      const get = /^GET \/(\d+) /.exec(head);
      if (get && me.sent === 0) {
        const body = Buffer.alloc(Number(get[1]), 0x62);
        send(`HTTP/1.0 200 OK\r\nContent-Length: ${body.length}\r\n\r\n`);
        send(body);
        s.end();
      }
    });
    s.on('end', () => {
      if (me.sent === 0) {
        send(`got ${me.received}\n`);
        s.end();
      }
    });
    s.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.2', resolve));
  return { server, port: (server.address() as AddressInfo).port, seen };
}

/** A docker session (agent link under a directory of the test's) whose egress allows the origin. */
async function proxiedSession(t: TestContext, prefix: string) {
  const root = await tempDirFor(t, prefix);
  const o = await origin();
  t.after(() => o.server.close());
  const backend = makeBackend({ agentSocketDir: root });
  t.after(() => backend.close());
  const session = await backend.createSession(sessionSpec());
  const records: EgressRecord[] = [];
  const allow = [`127.0.0.2:${o.port}`];
  const egress = new SessionEgress({ allow, entries: parseAllowList(allow), onRecord: (r) => records.push(r) });
  await egress.start(session);
  t.after(() => egress.close());
  return { o, session, egress, records };
}

async function until(what: string, ok: () => boolean, ms = 5000): Promise<void> {
  for (const end = Date.now() + ms; !ok() && Date.now() < end; ) await new Promise((r) => setTimeout(r, 10));
  assert.ok(ok(), what);
}

test(
  'egress hand-over: the relay takes the client socket; bytes counted exactly both ways; refusals still 403',
  dockerTestOptions,
  async (t) => {
    const { o, session, egress, records } = await proxiedSession(t, 'exec-server-egress-take-');

    // A download with the proxy variables (busybox wget): handed over, counted as the origin saw it.
    const size = 3 * 1024 * 1024 + 17;
    const got = await run(
      session,
      `wget -q -O - http://127.0.0.2:${o.port}/${size} | wc -c`,
      egressEnvironment(EGRESS_PROXY_PORT),
    );
    assert.equal(got.text('stdout').trim(), String(size), got.text('stderr'));
    await until('the download is recorded', () => records.length === 1);
    assert.equal(egress.counts.tookSocket, 1);
    const [download] = records;
    assert.equal(download?.allowed, true);
    assert.equal(download?.bytesIn, o.seen[0]?.sent);
    assert.equal(download?.bytesOut, o.seen[0]?.received);

    // An upload through CONNECT, sent whole with the request (so part of it crosses the tunnel
    // before the hand-over), then half-closed: the origin sees every byte, the answer comes back.
    const upload = 200_000;
    const up = await run(
      session,
      `{ printf 'CONNECT 127.0.0.2:${o.port} HTTP/1.1\\r\\n\\r\\n'; head -c ${upload} /dev/zero; } | nc 127.0.0.1 ${EGRESS_PROXY_PORT}`,
    );
    assert.match(up.text('stdout'), /^HTTP\/1\.1 200 Connection Established\r\n\r\ngot 200000\n$/, up.text());
    await until('the upload is recorded', () => records.length === 2);
    assert.equal(egress.counts.tookSocket, 2);
    assert.equal(o.seen[1]?.received, upload);
    assert.equal(records[1]?.bytesOut, upload);
    assert.equal(records[1]?.bytesIn, 'got 200000\n'.length);

    // A refusal is the proxy's own answer (mode 'P'): 403, nothing dialled, nothing handed over.
    const refused = await run(
      session,
      `printf 'GET http://127.0.0.2:1/ HTTP/1.1\\r\\nHost: 127.0.0.2:1\\r\\n\\r\\n' | nc 127.0.0.1 ${EGRESS_PROXY_PORT}`,
    );
    assert.match(refused.text('stdout'), /^HTTP\/1\.1 403 Forbidden\r\n[\s\S]*not in the session's allow-list/);
    assert.equal(o.seen.length, 2);
    assert.equal(egress.counts.tookSocket, 2);
    assert.equal(egress.counts.refused, 1);
    assert.equal(egress.counts.bytesIn, (o.seen[0]?.sent ?? 0) + (o.seen[1]?.sent ?? 0));
    assert.equal(egress.counts.active, 0);
  },
);

test(
  'egress limits in a container: past 64 connections a recorded 429; 64 unfinished heads do not block a prompt one',
  dockerTestOptions,
  async (t) => {
    const { o, session, egress, records } = await proxiedSession(t, 'exec-server-egress-limits-');
    const connect = `printf 'CONNECT 127.0.0.2:${o.port} HTTP/1.1\\r\\n\\r\\n'`;
    const nc = `nc 127.0.0.1 ${EGRESS_PROXY_PORT}`;

    // 64 tunnels held for 10 s (each handed over, so none holds a place in the agent), then one
    // more once the proxy counts all 64 open: polled, so a busy machine cannot send it early.
    const held = run(
      session,
      `for i in $(seq 64); do { ${connect}; exec sleep 10; } | ${nc} >/dev/null 2>&1 & done; wait`,
    );
    await until('64 tunnels open', () => egress.counts.active === 64, 20_000);
    const limit = await run(session, `${connect} | ${nc}`);
    await held;
    assert.match(limit.text('stdout'), /^HTTP\/1\.1 429 Too Many Requests\r\n[\s\S]*64 connections already open/);
    assert.equal(egress.counts.refused, 1);
    assert.deepEqual(
      records.filter((r) => !r.allowed).map((r) => r.reason),
      ['64 connections already open'],
    );

    // 64 heads never finished; 1.5 s later a complete one takes the place of the oldest (408).
    const heads = await run(
      session,
      `for i in $(seq 64); do { printf 'CONNECT 127.0.0.2:${o.port} HTTP/1.1\\r\\n'; exec sleep 5; } | ${nc} >/tmp/head$i 2>&1 & done; sleep 1.5; ${connect} | ${nc}; sleep 0.2; echo ---; cat /tmp/head*`,
    );
    assert.match(heads.text('stdout'), /^HTTP\/1\.1 200 Connection Established\r\n\r\ngot 0\n---\n/, heads.text());
    assert.match(heads.text('stdout'), /HTTP\/1\.1 408 Request Timeout\r\n[\s\S]*not complete after 1000 ms/);
  },
);
