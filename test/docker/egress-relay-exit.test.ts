/**
 * Egress when the session's relay process dies under a download (runc, hand-over; docs/
 * architecture.md, "Egress"). The relay reports a long connection's bytes as it goes, so the
 * session's counts grow while the download runs; `kill -9` of the relay then ends the connection
 * (the command sees its download end, it does not hang), the connection is recorded with the bytes
 * last reported and why (audit `egress.connection`), the death is logged and counted, and the
 * session's next connection starts another relay and is counted exactly. The destination is a
 * server of this test's own on 127.0.0.2 that sends slowly.
 */
import assert from 'node:assert/strict';
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import { test } from 'node:test';
import type { AuditEvent } from '../../src/audit/auditor.ts';
import { parseAllowList } from '../../src/egress/allow-list.ts';
import type { EgressRecord } from '../../src/egress/proxy.ts';
import { EGRESS_PROXY_PORT, egressEnvironment, SessionEgress } from '../../src/egress/session-egress.ts';
import { Metrics } from '../../src/metrics.ts';
import { relaydPids as relayds } from '../support/relayd.ts';
import { tempDirFor } from '../support/temp-dir.ts';
import { dockerTestOptions } from './engine.ts';
import { makeBackend, runScript as run, sessionSpec } from './helpers.ts';
import { until } from '../support/until.ts';

const SLOW_SIZE = 64 * 1024 * 1024;

/**
 * `GET /slow` answers SLOW_SIZE bytes of body in 64 KiB pieces every 20 ms (about 3 MB/s: the
 * download outlasts the test); `GET /N` answers N bytes at once. Bytes sent are counted.
 */
async function origin(): Promise<{ server: Server; port: number; sent: number[] }> {
  const sent: number[] = [];
  const server = createServer((s: Socket) => {
    const me = sent.push(0) - 1;
    const send = (b: Buffer | string): void => {
      sent[me] = (sent[me] ?? 0) + Buffer.byteLength(b);
      s.write(b);
    };
    s.on('error', () => undefined);
    s.once('data', (d: Buffer) => {
      const get = /^GET \/(\d+|slow) /.exec(d.toString('latin1'));
      if (get?.[1] === undefined) return void s.destroy();
      const size = get[1] === 'slow' ? SLOW_SIZE : Number(get[1]);
      send(`HTTP/1.0 200 OK\r\nContent-Length: ${size}\r\n\r\n`);
      if (get[1] !== 'slow') return void s.end(Buffer.alloc(size, 0x61), () => (sent[me] = (sent[me] ?? 0) + size));
      const piece = Buffer.alloc(64 * 1024, 0x62);
      const timer = setInterval(() => send(piece), 20);
      s.once('close', () => clearInterval(timer));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.2', resolve));
  return { server, port: (server.address() as AddressInfo).port, sent };
}

/** A session's egress whose records, audit events, warnings and metrics the test reads. */
function watchedEgress(port: number) {
  const records: EgressRecord[] = [];
  const audit: AuditEvent[] = [];
  const warnings: Array<{ obj: Record<string, unknown>; msg: string | undefined }> = [];
  const metrics = new Metrics();
  const allow = [`127.0.0.2:${port}`];
  const egress = new SessionEgress({
    allow,
    entries: parseAllowList(allow),
    metrics,
    audit: (e) => audit.push(e),
    log: { warn: (obj, msg) => warnings.push({ obj: obj as Record<string, unknown>, msg }) },
    onRecord: (r) => records.push(r),
  });
  return { egress, records, audit, warnings, metrics };
}

test(
  'egress: a relay killed mid-download ends the connection with its bytes counted; the next one gets a new relay',
  dockerTestOptions,
  async (t) => {
    const root = await tempDirFor(t, 'exec-server-egress-relay-exit-');
    const o = await origin();
    t.after(() => o.server.close());
    const backend = makeBackend({ agentSocketDir: root });
    t.after(() => backend.close());
    const session = await backend.createSession(sessionSpec());
    const { egress, records, audit, warnings, metrics } = watchedEgress(o.port);
    await egress.start(session);
    t.after(() => egress.close());
    const env = egressEnvironment(EGRESS_PROXY_PORT);

    // The slow download runs; its bytes are counted while it runs (the relay's progress reports).
    const slow = run(
      session,
      `wget -q -O /tmp/slow http://127.0.0.2:${o.port}/slow; echo "rc=$?"; wc -c < /tmp/slow`,
      env,
    );
    await until('the download is counted while it runs', () => egress.counts.bytesIn > 1024 * 1024);
    assert.equal(records.length, 0, 'still open');
    assert.equal(egress.counts.active, 1);
    assert.equal(egress.counts.tookSocket, 1);
    const [pid, ...others] = relayds();
    assert.ok(pid !== undefined && others.length === 0, 'one relay process for the session');

    process.kill(pid, 'SIGKILL');
    const countedBefore = egress.counts.bytesIn;
    // The command sees its connection end (a short download), well within the test's time.
    const ended = await Promise.race([slow, new Promise<undefined>((r) => setTimeout(r, 20_000, undefined))]);
    assert.ok(ended, 'the download ended when the relay died');
    const [rc, got] = ended.text('stdout').trim().split('\n');
    assert.notEqual(rc, 'rc=0', ended.text());
    assert.ok(Number(got) > 0 && Number(got) < SLOW_SIZE, `a part of it arrived: ${got}`);

    await until('the connection is recorded', () => records.length === 1);
    const [cut] = records;
    assert.equal(cut?.allowed, true);
    assert.match(cut?.reason ?? '', /relay process ended \(signal SIGKILL\): bytes as last reported/);
    assert.ok((cut?.bytesIn ?? 0) >= countedBefore && countedBefore > 0, 'the bytes reported before it died');
    assert.ok((cut?.bytesIn ?? 0) <= (o.sent[0] ?? 0), 'never more than the destination sent');
    assert.equal(egress.counts.bytesIn, cut?.bytesIn);
    assert.equal(egress.counts.active, 0);
    const detail = audit.find((e) => e.action === 'egress.connection')?.detail;
    assert.equal(detail?.['bytesIn'], cut?.bytesIn);
    assert.match(String(detail?.['reason']), /relay process ended/);
    assert.equal(warnings.length, 1);
    assert.deepEqual(
      {
        pid: warnings[0]?.obj['relayPid'],
        signal: warnings[0]?.obj['signal'],
        open: warnings[0]?.obj['openConnections'],
      },
      { pid, signal: 'SIGKILL', open: 1 },
    );
    const text = await metrics.registry.metrics();
    assert.match(text, /^exec_server_egress_relay_exits_total 1$/m);
    assert.match(text, new RegExp(`^exec_server_egress_bytes_total\\{direction="in"\\} ${cut?.bytesIn}$`, 'm'));

    // The next connection starts a new relay, relays and is counted exactly.
    const size = 2 * 1024 * 1024 + 3;
    const next = await run(session, `wget -q -O - http://127.0.0.2:${o.port}/${size} | wc -c`, env);
    assert.equal(next.text('stdout').trim(), String(size), next.text('stderr'));
    await until('the next download is recorded', () => records.length === 2);
    assert.equal(records[1]?.reason, undefined);
    assert.equal(records[1]?.bytesIn, o.sent[1]);
    assert.equal(egress.counts.tookSocket, 2);
    const [fresh] = relayds();
    assert.ok(fresh !== undefined && fresh !== pid, 'a new relay process');
  },
);
