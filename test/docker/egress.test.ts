/**
 * Egress by allow-list against a real engine (docs/architecture.md, "Egress"): the exec agent
 * listens on 127.0.0.1:3128 inside a `--network none` container and tunnels every client over
 * its link to the server's proxy. Every destination is a server of this test's own on 127.0.0.2
 * (127.0.0.1 stays inside the session: NO_PROXY); nothing else is ever dialled.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import type { BackendSession } from '../../src/backends/types.ts';
import { parseAllowList } from '../../src/egress/allow-list.ts';
import type { EgressRecord } from '../../src/egress/proxy.ts';
import { EGRESS_PROXY_PORT, egressEnvironment, SessionEgress } from '../../src/egress/session-egress.ts';
import type { SessionInfo } from '../../src/protocol/index.ts';
import { type ExecAnswer, newSession, serverWithApi } from '../http/helpers.ts';
import { dockerTestOptions } from './engine.ts';
import { docker, makeBackend, runScript as run, sessionSpec } from './helpers.ts';
import { tempDirFor } from '../support/temp-dir.ts';

const BODY = 'hello from the egress test\n';
/**
 * Three times a command's unread-stdin budget (8 MiB): under gVisor a download crosses the
 * tunnel process's stdin, which must wait for room rather than fail (process-stream.ts).
 */
const BIG = 24 << 20;

async function listen(host: string): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    res.setHeader('Content-Type', 'text/plain');
    res.end(req.url === '/big' ? Buffer.alloc(BIG, 0x61) : BODY);
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { server, port: (server.address() as AddressInfo).port };
}

/** A raw request to the proxy inside the session (busybox nc), its whole answer. */
function viaProxy(request: string): string {
  const escaped = request.replace(/\r\n/g, '\\r\\n');
  return `printf '${escaped}' | nc 127.0.0.1 ${EGRESS_PROXY_PORT}`;
}

test(
  'egress: allowed destination over HTTP and CONNECT; other port, loopback under *, a loopback name refused 403; no direct path; none without network',
  dockerTestOptions,
  async (t) => {
    const root = await tempDirFor(t, 'exec-server-egress-');
    const allowed = await listen('127.0.0.2');
    const other = await listen('127.0.0.2');
    t.after(() => {
      allowed.server.close();
      other.server.close();
    });
    const backend = makeBackend({ agentSocketDir: root });
    t.after(() => backend.close());
    const records: EgressRecord[] = [];
    const withEgress = async (allow: string[]): Promise<{ session: BackendSession; egress: SessionEgress }> => {
      const session = await backend.createSession(sessionSpec());
      const egress = new SessionEgress({ allow, entries: parseAllowList(allow), onRecord: (r) => records.push(r) });
      await egress.start(session);
      t.after(() => egress.close());
      return { session, egress };
    };
    const env = egressEnvironment(EGRESS_PROXY_PORT);
    const [a, star, plain] = await Promise.all([
      withEgress([`127.0.0.2:${allowed.port}`, 'localhost']),
      withEgress(['*']),
      backend.createSession(sessionSpec()),
    ]);

    // HTTP forward proxying, as any tool that honours HTTP_PROXY does it.
    const http = await run(a.session, `wget -q -O - http://127.0.0.2:${allowed.port}/`, env);
    assert.equal(http.text('stdout'), BODY, http.text('stderr'));
    const big = await run(a.session, `wget -q -O - http://127.0.0.2:${allowed.port}/big | wc -c`, env);
    assert.equal(big.text('stdout').trim(), String(BIG), big.text('stderr'));
    // CONNECT: a tunnel, then any protocol (here HTTP again) through it.
    const connect = await run(
      a.session,
      viaProxy(
        `CONNECT 127.0.0.2:${allowed.port} HTTP/1.1\r\nHost: 127.0.0.2:${allowed.port}\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
      ),
    );
    assert.match(
      connect.text('stdout'),
      /^HTTP\/1\.1 200 Connection Established\r\n\r\nHTTP\/1\.1 200 OK/,
      `${connect.text()} ${JSON.stringify(records)}`,
    );
    assert.ok(connect.text('stdout').endsWith(BODY), connect.text('stdout'));

    // Refusals: 403 with the reason, and nothing dialled.
    const refusal = async (session: BackendSession, target: string, reason: RegExp): Promise<void> => {
      const r = await run(session, viaProxy(`GET http://${target}/ HTTP/1.1\r\nHost: ${target}\r\n\r\n`));
      assert.match(r.text('stdout'), /^HTTP\/1\.1 403 Forbidden\r\n/, `${target}: ${r.text()}`);
      assert.match(r.text('stdout'), reason, target);
    };
    const servedBefore = (await new Promise<number>((r) => other.server.getConnections((_e, n) => r(n)))) as number;
    await refusal(a.session, `127.0.0.2:${other.port}`, /not in the session's allow-list/);
    await refusal(a.session, `localhost:${allowed.port}`, /127\.0\.0\.1 is a loopback address|::1 is a loopback/);
    await refusal(star.session, `127.0.0.2:${allowed.port}`, /127\.0\.0\.2 is a loopback address/);
    await refusal(star.session, `localhost:${other.port}`, /is a loopback address/);
    const connectRefused = await run(star.session, viaProxy(`CONNECT 127.0.0.2:${other.port} HTTP/1.1\r\n\r\n`));
    assert.match(connectRefused.text('stdout'), /^HTTP\/1\.1 403 Forbidden/);
    assert.equal(await new Promise<number>((r) => other.server.getConnections((_e, n) => r(n))), servedBefore);

    // No way around the proxy: the container has no network of its own.
    const direct = await run(a.session, `wget -q -T 3 -O - http://127.0.0.2:${allowed.port}/ 2>&1; echo "exit=$?"`);
    assert.match(direct.text('stdout'), /exit=[1-9]/);
    assert.doesNotMatch(direct.text('stdout'), /hello from the egress test/);
    // A session created without `network`: no proxy, no network.
    const none = await run(plain, `wget -q -T 3 -O - http://127.0.0.2:${allowed.port}/ 2>&1; echo "exit=$?"`, env);
    assert.match(none.text('stdout'), /exit=[1-9]/);
    assert.doesNotMatch(none.text('stdout'), /hello from the egress test/);

    // Counts and records: what was relayed, what was refused.
    assert.equal(a.egress.counts.connections, 3);
    assert.equal(a.egress.counts.refused, 2);
    assert.ok(a.egress.counts.bytesIn > BIG, `bytes in: ${a.egress.counts.bytesIn}`);
    assert.equal(star.egress.counts.refused, 3);
    const relayed = records.filter((r) => r.allowed);
    assert.equal(relayed.length, 3);
    for (const r of relayed) assert.equal(r.address, '127.0.0.2');
    assert.ok(records.some((r) => !r.allowed && r.host === 'localhost'));
  },
);

test(
  'egress through the API: POST /v1/sessions with network, the proxy variables, session/info counts, /metrics, a bad entry is a 400',
  dockerTestOptions,
  async (t) => {
    const origin = await listen('127.0.0.2');
    t.after(() => origin.server.close());
    const dir = await tempDirFor(t, 'exec-server-egress-audit-');
    const auditPath = join(dir, 'audit.jsonl');
    const api = await serverWithApi(t, { backend: 'docker', flags: ['--audit-log', auditPath] });
    const bad = await api('POST', '/v1/sessions', { network: { allow: ['example.com:99999'] } });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.code, 'EXEC_ERR_INVALID_PARAMS');
    assert.match(String(bad.body.message), /session\.network\.allow\[0\] "example\.com:99999": port 99999/);
    const id = await newSession(api, {
      network: { allow: [`127.0.0.2:${origin.port}`] },
      sandbox: { type: 'workspace-write', networkAccess: true },
    });
    // The allow-list wins over the sandbox's networkAccess: the container has no network of its own.
    const containerId = (await api<SessionInfo>('GET', `/v1/sessions/${id}`)).body.containerId ?? '';
    assert.equal((await docker('inspect', '-f', '{{.HostConfig.NetworkMode}}', containerId)).trim(), 'none');
    const exec = async (cmd: string): Promise<ExecAnswer> =>
      (await api<ExecAnswer>('POST', `/v1/sessions/${id}/exec_command`, { cmd, login: false, yield_time_ms: 10000 }))
        .body;
    const env = await exec('echo "$HTTP_PROXY $https_proxy $ALL_PROXY $NO_PROXY"');
    assert.match(
      env.output,
      /http:\/\/127\.0\.0\.1:3128 http:\/\/127\.0\.0\.1:3128 http:\/\/127\.0\.0\.1:3128 localhost,127\.0\.0\.1/,
    );
    // A sandboxed command (the session's policy) reaches it as well.
    const fetched = await exec(`wget -q -O - http://127.0.0.2:${origin.port}/`);
    // (bash in the test image warns that it has no C.UTF-8 locale)
    assert.ok(fetched.output.endsWith(BODY), fetched.output);
    const refused = await exec(`wget -q -O - http://127.0.0.2:1/ 2>&1; echo "exit=$?"`);
    assert.match(refused.output, /403 Forbidden[\s\S]*exit=1/);
    const info = (await api<SessionInfo>('GET', `/v1/sessions/${id}`)).body;
    assert.equal(info.egress?.proxy, 'http://127.0.0.1:3128');
    assert.deepEqual(info.egress?.allow, [`127.0.0.2:${origin.port}`]);
    assert.equal(info.egress?.connections, 1);
    assert.equal(info.egress?.refused, 1);
    assert.ok((info.egress?.bytesIn ?? 0) > BODY.length);
    const metrics = await (await fetch(`${api.server.httpUrl}/metrics`)).text();
    assert.match(metrics, new RegExp(`exec_server_egress_session_connections\\{session="${id}",result="allowed"\\} 1`));
    assert.match(metrics, new RegExp(`exec_server_egress_session_bytes\\{session="${id}",direction="in"\\} \\d+`));
    assert.match(metrics, /exec_server_egress_connections_total\{result="refused"\} 1/);
    // One audit event per connection: where, allowed or refused (and why), bytes.
    // Lines are written in batches after the fact: read until both are there (10 s at most).
    const egressEvents = async () =>
      (await readFile(auditPath, 'utf8'))
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { action: string; session: string | null; detail: Record<string, unknown> })
        .filter((e) => e.action === 'egress.connection');
    let events = await egressEvents();
    for (const end = Date.now() + 10_000; events.length < 2 && Date.now() < end; events = await egressEvents())
      await new Promise((r) => setTimeout(r, 50));
    assert.equal(events.length, 2, JSON.stringify(events));
    const [ok, no] = events;
    assert.equal(ok?.session, id);
    assert.equal(ok?.detail['allowed'], true);
    assert.equal(ok?.detail['host'], '127.0.0.2');
    assert.equal(ok?.detail['port'], origin.port);
    assert.ok(Number(ok?.detail['bytesIn']) > BODY.length);
    assert.equal(no?.detail['allowed'], false);
    assert.equal(no?.detail['port'], 1);
    assert.match(String(no?.detail['reason']), /not in the session's allow-list/);
  },
);
