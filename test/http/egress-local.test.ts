/**
 * `network.allow` on the local backend (docs/architecture.md, "Egress"): a sandboxed command
 * (bubblewrap, its own network namespace) reaches the allowed destination, a server of this
 * test's own on 127.0.0.2, through the proxy the wrapper serves in its namespace (24 MB too); another port is
 * refused with 403, a direct connection fails; an unsandboxed session cannot have an allow-list
 * (501), and a malformed entry is a 400 naming it.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { ExecServerClient } from '../../src/client/index.ts';
import type { SessionInfo } from '../../src/protocol/index.ts';
import { type Api, type ExecAnswer, newSession, serverWithApi } from './helpers.ts';

const BODY = 'hello from the local egress test\n';
/** Three times a command's unread-stdin budget: a download that must stream, not be held. */
const BIG = 24 << 20;

test('local backend: egress through the sandbox namespace, refusals, and what cannot have it', async (t) => {
  const origin = createServer((req, res) => res.end(req.url === '/big' ? Buffer.alloc(BIG, 0x61) : BODY));
  await new Promise<void>((r) => origin.listen(0, '127.0.0.2', r));
  t.after(() => origin.close());
  const port = (origin.address() as AddressInfo).port;
  const api = await serverWithApi(t);

  const bad = await api('POST', '/v1/sessions', { network: { allow: ['10.0.0.0/40'] } });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.code, 'EXEC_ERR_INVALID_PARAMS');
  assert.match(String(bad.body.message), /session\.network\.allow\[0\] "10\.0\.0\.0\/40": prefix/);
  const extra = await api('POST', '/v1/sessions', { network: { allow: ['*'], deny: [] } });
  assert.equal(extra.status, 400, 'unknown fields are refused');
  const unsandboxed = await api('POST', '/v1/sessions', {
    network: { allow: ['*'] },
    sandbox: { type: 'danger-full-access' },
  });
  assert.equal(unsandboxed.status, 501);
  assert.equal(unsandboxed.body.code, 'EXEC_ERR_UNSUPPORTED');
  assert.equal((await api<{ sessions: unknown[] }>('GET', '/v1/sessions')).body.sessions.length, 0);

  const id = await newSession(api, { network: { allow: [`127.0.0.2:${port}`] } });
  const exec = async (cmd: string): Promise<string> =>
    (await api<ExecAnswer>('POST', `/v1/sessions/${id}/exec_command`, { cmd, login: false, yield_time_ms: 10000 })).body
      .output;
  assert.ok((await exec(`wget -q -O - http://127.0.0.2:${port}/`)).endsWith(BODY));
  assert.match(await exec(`wget -q -O - http://127.0.0.2:${port}/big | wc -c`), new RegExp(`^\\s*${BIG}\\s*$`, 'm'));
  assert.match(await exec(`curl -s -o /dev/null -w '%{http_code}' http://127.0.0.2:1/`), /403/);
  const direct = await exec(`curl -s --noproxy '*' -m 3 http://127.0.0.2:${port}/; echo "exit=$?"`);
  assert.match(direct, /exit=[1-9]/);
  assert.doesNotMatch(direct, /hello from the local egress test/);
  const info = (await api<SessionInfo>('GET', `/v1/sessions/${id}`)).body;
  assert.equal(info.egress?.connections, 2);
  assert.equal(info.egress?.refused, 1);
  assert.ok((info.egress?.bytesIn ?? 0) > BIG, `bytes in: ${info.egress?.bytesIn}`);

  // The same through the WebSocket `initialize` session options and the TypeScript SDK.
  const client = await ExecServerClient.connect(api.server.url, {
    session: { network: { allow: [`127.0.0.2:${port}`] } },
  });
  try {
    const result = await (await client.exec(['wget', '-q', '-O', '-', `http://127.0.0.2:${port}/`])).wait();
    assert.equal(result.stdout, BODY);
    const wsInfo = (await api<SessionInfo>('GET', `/v1/sessions/${client.sessionId}`)).body;
    assert.equal(wsInfo.egress?.proxy, 'http://127.0.0.1:3128');
  } finally {
    await client.deleteSession();
  }
});

/**
 * A client run inside the sandbox (node, argv: TARGET MODE): it speaks to the proxy named by
 * HTTP_PROXY and prints what it got as JSON. `slowloris`: 64 unfinished heads held, then after
 * 1.5 s a complete CONNECT; `limit`: 64 tunnels held open, then one more; `agent`: 64 tunnels
 * and 64 unfinished heads held, then one more.
 */
const CLIENT = `
const net = require('node:net');
const [target, mode] = process.argv.slice(1);
const proxy = { host: '127.0.0.1', port: Number(new URL(process.env.HTTP_PROXY).port) };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const held = [];
function partial() {
  const s = net.connect(proxy);
  s.answer = '';
  s.on('data', (d) => { s.answer += d; });
  s.on('error', () => undefined);
  s.write('CONNECT ' + target + ' HTTP/1.1\\r\\n');
  held.push(s);
}
function connect() {
  return new Promise((resolve) => {
    const s = net.connect(proxy);
    let got = '';
    const done = (why) => resolve({ status: got.split('\\r\\n')[0] || why, body: got.split('\\r\\n\\r\\n')[1] ?? '' });
    s.on('data', (d) => { got += d; if (got.includes('\\r\\n\\r\\n')) done(); });
    s.on('end', () => done('end'));
    s.on('error', (e) => done('error ' + e.code));
    s.write('CONNECT ' + target + ' HTTP/1.1\\r\\n\\r\\n');
    held.push(s);
  });
}
(async () => {
  const out = { tunnels: {} };
  if (mode !== 'slowloris')
    for (let i = 0; i < 64; i++) { const r = await connect(); out.tunnels[r.status] = (out.tunnels[r.status] ?? 0) + 1; }
  if (mode !== 'limit') for (let i = 0; i < 64; i++) partial();
  await sleep(mode === 'slowloris' ? 1500 : 300);
  out.last = await connect();
  out.heads = held.filter((s) => s.answer !== undefined).map((s) => s.answer.split('\\r\\n')[0]).filter(Boolean);
  console.log(JSON.stringify(out));
  process.exit(0);
})();
`;

interface ClientReport {
  tunnels: Record<string, number>;
  last: { status: string; body: string };
  heads: string[];
}

test('local backend: unfinished heads do not block the session; past each limit the answer is a 429', async (t) => {
  const origin = createServer((_req, res) => res.end(BODY));
  await new Promise<void>((r) => origin.listen(0, '127.0.0.2', r));
  t.after(() => origin.closeAllConnections());
  t.after(() => origin.close());
  const target = `127.0.0.2:${(origin.address() as AddressInfo).port}`;
  const api = await serverWithApi(t);
  const client = await ExecServerClient.connect(api.server.url, { session: { network: { allow: [target] } } });
  try {
    await overload(api, client, target);
  } finally {
    await client.deleteSession();
  }
});

async function overload(api: Api, client: ExecServerClient, target: string): Promise<void> {
  const run = async (mode: string): Promise<ClientReport> => {
    const result = await (await client.exec([process.execPath, '-e', CLIENT, target, mode])).wait();
    assert.equal(result.exitCode, 0, result.stderr);
    return JSON.parse(result.stdout) as ClientReport;
  };

  // One command holds 64 unfinished heads: a complete one still gets through, in place of the oldest.
  const slow = await run('slowloris');
  assert.equal(slow.last.status, 'HTTP/1.1 200 Connection Established', JSON.stringify(slow));
  assert.ok(
    slow.heads.some((h) => /^HTTP\/1\.1 408 /.test(h)),
    JSON.stringify(slow.heads),
  );

  // Past the session's 64 connections: the server's 429, with its reason, counted as refused.
  const limit = await run('limit');
  assert.deepEqual(limit.tunnels, { 'HTTP/1.1 200 Connection Established': 64 });
  assert.equal(limit.last.status, 'HTTP/1.1 429 Too Many Requests', JSON.stringify(limit.last));
  assert.match(limit.last.body, /64 connections already open/);
  const info = (await api<SessionInfo>('GET', `/v1/sessions/${client.sessionId}`)).body;
  // The heads answered 408 above are refusals too (before they named a destination).
  const evicted = slow.heads.filter((h) => /^HTTP\/1\.1 408 /.test(h)).length;
  assert.equal(info.egress?.refused, evicted + 1);

  // 64 tunnels and 64 heads fill the agent's 128 places: it answers the next itself.
  const agent = await run('agent');
  assert.equal(agent.last.status, 'HTTP/1.1 429 Too Many Requests', JSON.stringify(agent.last));
  assert.match(agent.last.body, /128 connections already open through this proxy/);
}
