/**
 * MCP and preview ports in a fleet: replica B serves what a session replica A owns. Two server
 * processes with one --instance-id, --fleet and two tenants' tokens, on one engine.
 * MCP (src/mcp/forwarded-calls.ts): B's `list_sessions` lists A's session; `exec_command`,
 * `write_stdin`, `write_file` and `read_file` naming it run on A (A keeps it, nothing is taken
 * over), and bind it; another tenant's call is told the session does not exist; a session token
 * cannot use the replicas' route; A SIGKILLed, B's next call takes the session over and runs it.
 * Preview (src/preview/fleet-preview.ts): a port of A's session through B with the tenant's
 * token, a signed URL and its cookie, the wildcard host, a WebSocket, and a session token until
 * it is revoked; after the take-over B serves the ports A exposed (they are in the session's record).
 * A's audit log names the client of a request B forwarded, not B.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request as httpRequest } from 'node:http';
import { test } from 'node:test';
import type { PreviewAnswer, SessionToken } from '../../src/protocol/index.ts';
import { requestJson, createSession } from '../http/helpers.ts';
import { call, mcpClient, textOf } from '../mcp/helpers.ts';
import type { DevServer } from '../support/dev-server.ts';
import { sleep } from '../support/harness.ts';
import { nextMessage, wsEcho, wsOpen } from '../preview/ws-echo.ts';
import { dockerTestOptions } from './engine.ts';
import { Fleet } from './fleet-replicas.ts';

const instanceId = `fleet-access-${randomUUID().slice(0, 8)}`;
const HTTP_PORT = 18_080;
const WS_PORT = 18_081;
const PAGE = 'fleet preview\n';
const auditDir = mkdtempSync(join(tmpdir(), 'fleet-access-audit-'));
const ALICE = `alice-${randomUUID()}`;
const BOB = `bob-${randomUUID()}`;

const fleet = new Fleet({
  instanceId,
  // No --session-token-secret nor --preview-secret: both keys derive from the tenant tokens.
  flags: (name) => [
    ...['--warm-pool', '0', '--preview-host', 'preview.test'],
    ...['--audit-log', join(auditDir, `${name}.jsonl`)],
  ],
  env: { ...process.env, EXEC_SERVER_TOKENS: `alice:${ALICE},bob:${BOB}` },
});

/**
 * An exec_command through B from the client address 127.0.0.5 (B forwards it from 127.0.0.1):
 * A's audit log names the client, as B vouched for it (src/transport/client-address.ts).
 */
async function auditedThroughB(b: DevServer, id: string): Promise<void> {
  const url = new URL(`${b.http}/v1/sessions/${id}/exec_command`);
  const body = JSON.stringify({ cmd: 'echo audited-through-b', login: false });
  const status = await new Promise<number>((resolve, reject) => {
    const headers = { authorization: `Bearer ${ALICE}`, 'content-type': 'application/json' };
    const req = httpRequest(
      { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', localAddress: '127.0.0.5', headers },
      (res) => res.resume().once('end', () => resolve(res.statusCode ?? 0)),
    );
    req.once('error', reject);
    req.end(body);
  });
  assert.equal(status, 200);
  let line: { remote?: string } | undefined;
  for (let i = 0; i < 50 && line === undefined; i++) {
    const text = await readFile(join(auditDir, 'a.jsonl'), 'utf8').catch(() => '');
    line = text
      .split('\n')
      .filter((l) => l.includes('"process.start"') && l.includes('audited-through-b'))
      .map((l) => JSON.parse(l) as { remote?: string })[0];
    if (line === undefined) await sleep(100);
  }
  assert.equal(line?.remote, '127.0.0.5', "A's audit log names the client, not B");
}

/** A GET with its own Host header (fetch does not let a caller set one). */
function hostGet(base: string, host: string, path: string, token: string): Promise<{ status: number; body: string }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const headers = { host, authorization: `Bearer ${token}` };
    const req = httpRequest({ host: url.hostname, port: url.port, path, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Starts a page server and a WebSocket echo server in session `id` (on A), and exposes both through B. */
async function servePorts(a: DevServer, b: DevServer, id: string): Promise<[PreviewAnswer, PreviewAnswer]> {
  const upload = await fetch(`${b.http}/v1/sessions/${id}/files/content?path=/tmp/ws-echo`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${ALICE}`, 'content-type': 'application/octet-stream' },
    body: await readFile(await wsEcho()),
  });
  assert.equal(upload.status, 200, await upload.text());
  const script = [
    `chmod 755 /tmp/ws-echo && mkdir -p /tmp/www && printf '${PAGE.trim()}\\n' > /tmp/www/index.html`,
    `busybox httpd -p 127.0.0.1:${HTTP_PORT} -h /tmp/www && (setsid /tmp/ws-echo ${WS_PORT} >/dev/null 2>&1 &)`,
  ].join(' && ');
  const started = await requestJson<{ exit_code?: number }>(
    `${a.http}/v1/sessions/${id}/exec_command`,
    'POST',
    { cmd: script, login: false },
    ALICE,
  );
  assert.equal(started.body.exit_code, 0, JSON.stringify(started.body));
  const expose = async (port: number): Promise<PreviewAnswer> => {
    const r = await requestJson<PreviewAnswer>(`${b.http}/v1/sessions/${id}/ports`, 'POST', { port }, ALICE);
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body;
  };
  return [await expose(HTTP_PORT), await expose(WS_PORT)];
}

/** Preview ports of A's session `id` through B: every way in, and a session token until revoked. */
async function previewThroughB(a: DevServer, b: DevServer, id: string): Promise<void> {
  const [page, echo] = await servePorts(a, b, id);
  const bearer = { authorization: `Bearer ${ALICE}` };
  let res = await fetch(`${b.http}${page.path}`, { headers: bearer });
  for (let i = 0; i < 100 && res.status === 502; i++) {
    await sleep(200);
    res = await fetch(`${b.http}${page.path}`, { headers: bearer });
  }
  assert.equal(`${res.status} ${await res.text()}`, `200 ${PAGE}`, 'the tenant token, through B');
  const signed = await fetch(`${b.http}${page.signedPath}`, { redirect: 'manual' });
  assert.equal(signed.status, 302, 'a signed URL through B: its token traded for a cookie');
  const cookie = (signed.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  assert.equal(await (await fetch(`${b.http}${page.path}`, { headers: { cookie } })).text(), PAGE);
  assert.deepEqual(await hostGet(b.http, page.host ?? '', '/', ALICE), { status: 200, body: PAGE }, 'wildcard host');
  const ws = await wsOpen(`${b.url}${echo.path}echo`, bearer, ['chat']);
  const reply = nextMessage(ws);
  ws.send('through b');
  assert.equal(await reply, 'through b', 'a WebSocket through B');
  ws.close();
  const minted = await requestJson<SessionToken>(
    `${b.http}/v1/sessions/${id}/tokens`,
    'POST',
    { access: 'read' },
    ALICE,
  );
  const scoped = { authorization: `Bearer ${minted.body.token}` };
  assert.equal((await fetch(`${b.http}${page.path}`, { headers: scoped })).status, 200, 'a session token');
  const revoke = `${b.http}/v1/sessions/${id}/tokens/${minted.body.tokenId}`;
  assert.equal((await requestJson(revoke, 'DELETE', undefined, ALICE)).status, 204);
  assert.equal((await fetch(`${b.http}${page.path}`, { headers: scoped })).status, 401, 'A refuses it once revoked');
}

test('MCP connections and preview ports on one replica work on a session another replica owns', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  const [a, b] = await fleet.begin(t, 'a', 'b');
  const { sessionId: id } = await createSession(
    a,
    { sandbox: { type: 'danger-full-access' }, previewPorts: true },
    ALICE,
  );

  const { client, transport } = await mcpClient(t, b.http, { token: ALICE });
  assert.match(transport.sessionId ?? '', /^b~/, 'B holds this MCP connection');
  const listed = await call<{ sessions: { sessionId: string }[] }>(client, 'list_sessions');
  assert.ok(
    listed.structuredContent?.sessions?.some((s) => s.sessionId === id),
    `B's list_sessions lists A's session: ${textOf(listed)}`,
  );

  const ran = await call<{ exit_code: number }>(client, 'exec_command', {
    session: id,
    cmd: 'echo from-a > /tmp/marker; cat /tmp/marker; exit 4',
  });
  assert.equal(ran.isError, undefined, textOf(ran));
  assert.match(textOf(ran), /from-a/);
  assert.equal(ran.structuredContent?.exit_code, 4);
  // The call bound the session: one without `session` works on it too, on A.
  const bound = await call(client, 'exec_command', { cmd: 'cat /tmp/marker' });
  assert.match(textOf(bound), /from-a/, textOf(bound));
  const shell = await call<{ session_id: number }>(client, 'exec_command', {
    cmd: 'read -r line; echo "got:$line"',
    tty: true,
    yield_time_ms: 300,
  });
  const sid = shell.structuredContent?.session_id;
  assert.equal(typeof sid, 'number', `a command still running answers its session_id: ${textOf(shell)}`);
  const answered = await call(client, 'write_stdin', { session: id, session_id: sid, chars: 'hello\n' });
  assert.match(textOf(answered), /got:hello/, textOf(answered));
  const wrote = await call(client, 'write_file', { session: id, path: '/tmp/note.txt', content: 'via b' });
  assert.equal(wrote.isError, undefined, textOf(wrote));
  assert.match(textOf(await call(client, 'read_file', { path: '/tmp/note.txt' })), /via b/);
  assert.doesNotMatch(b.stderr(), /took over/, 'B ran every call on the live owner');
  const info = await requestJson<{ attached: boolean }>(`${a.http}/v1/sessions/${id}`, 'GET', undefined, ALICE);
  assert.equal(info.status, 200, 'A still serves the session itself');

  // Another tenant: the owner checks the caller's own token.
  const { client: bobs } = await mcpClient(t, b.http, { token: BOB });
  const foreign = await call<{ code: string }>(bobs, 'exec_command', { session: id, cmd: 'true' });
  assert.equal(foreign.isError, true);
  assert.equal(foreign.structuredContent?.code, 'EXEC_ERR_SESSION_NOT_FOUND', textOf(foreign));
  assert.ok(
    !(await call<{ sessions: { sessionId: string }[] }>(bobs, 'list_sessions')).structuredContent?.sessions?.length,
  );

  // The replicas' route takes tenant tokens only: a session token (even full) cannot fork through it.
  const minted = await requestJson<{ token: string }>(`${b.http}/v1/sessions/${id}/tokens`, 'POST', {}, ALICE);
  assert.equal(minted.status, 201, JSON.stringify(minted.body));
  const scoped = await requestJson<{ code: string }>(
    `${b.http}/v1/sessions/${id}/mcp-call`,
    'POST',
    { name: 'fork_session', arguments: {} },
    minted.body.token,
  );
  assert.equal(scoped.status, 403);
  assert.equal(scoped.body.code, 'EXEC_ERR_TOKEN_SCOPE');

  await previewThroughB(a, b, id);
  await auditedThroughB(b, id);

  // The owner gone: B's next call takes the session over (its lease ends with A) and runs it here.
  await a.kill();
  const after = await call(client, 'exec_command', { cmd: 'cat /tmp/marker /tmp/note.txt' });
  assert.match(textOf(after), /from-a[\s\S]*via b/, textOf(after));
  assert.match(b.stderr(), new RegExp(`"sessionId":"${id}"[^\n]*took over a session whose owner is gone`));
  // Its exposed ports were in the session's record: B serves them after the take-over.
  const page = await fetch(`${b.http}/v1/sessions/${id}/ports/${HTTP_PORT}/`, {
    headers: { authorization: `Bearer ${ALICE}` },
  });
  assert.equal(`${page.status} ${await page.text()}`, `200 ${PAGE}`);
});
