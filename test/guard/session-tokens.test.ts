/**
 * Tokens scoped to one session, against a real server (local backend): what a `full` and a
 * `read` token open and refuse over HTTP and WebSocket, another session, listing, creating,
 * expiry, revocation (live connections included), deletion of the session, a replica with the
 * same tenant tokens and one with other tokens.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { ExecServerClient } from '../../src/client/client.ts';
import { RpcConnection, type RpcError } from '../../src/client/rpc-connection.ts';
import type { SessionToken } from '../../src/protocol/index.ts';
import { startServer } from '../support/harness.ts';
import { newSession, requestJson, serverWithApi, type Api } from '../http/helpers.ts';

const TOKENS = ['--tokens', 'acme:tenant-secret-acme,other:tenant-secret-other'];
const ACME = 'tenant-secret-acme';

async function mint(api: Api, id: string, body: Record<string, unknown> = {}): Promise<SessionToken> {
  const r = await api<SessionToken>('POST', `/v1/sessions/${id}/tokens`, body, ACME);
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body;
}

async function ws(t: TestContext, api: Api, token: string): Promise<RpcConnection> {
  const conn = await RpcConnection.open(api.server.url, { token });
  t.after(() => conn.close());
  return conn;
}

const code = (c: string) => (err: RpcError) => err.code === c;

test('a full token opens its session only: HTTP, WebSocket resume, processes and files', async (t) => {
  const api = await serverWithApi(t, { flags: TOKENS });
  const id = await newSession(api, {}, ACME);
  const otherId = await newSession(api, {}, ACME);
  const workdir = (await api<{ workdir: string }>('GET', `/v1/sessions/${id}`, undefined, ACME)).body.workdir;
  const tok = await mint(api, id, { access: 'full', ttlSeconds: 600 });
  assert.match(tok.token, /^est1\./);
  assert.match(tok.tokenId, /^tok_/);
  assert.ok(Math.abs(Date.parse(tok.expiresAt) - (Date.now() + 600_000)) < 5000);

  assert.equal((await api('GET', `/v1/sessions/${id}`, undefined, tok.token)).status, 200);
  const put = await fetch(`${api.server.httpUrl}/v1/sessions/${id}/files/content?path=${workdir}/a.txt`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${tok.token}`, 'content-type': 'application/octet-stream' },
    body: 'hello',
  });
  assert.equal(put.status, 200);
  const refused: Array<[string, string, unknown, number, string]> = [
    ['GET', `/v1/sessions/${otherId}`, undefined, 403, 'EXEC_ERR_TOKEN_SCOPE'],
    ['DELETE', `/v1/sessions/${otherId}`, undefined, 403, 'EXEC_ERR_TOKEN_SCOPE'],
    ['GET', '/v1/sessions', undefined, 403, 'EXEC_ERR_TOKEN_SCOPE'],
    ['POST', '/v1/sessions', {}, 403, 'EXEC_ERR_TOKEN_SCOPE'],
    ['GET', '/v1/snapshots', undefined, 403, 'EXEC_ERR_TOKEN_SCOPE'],
    ['POST', `/v1/sessions/${id}/tokens`, { access: 'full' }, 403, 'EXEC_ERR_TOKEN_SCOPE'],
    ['POST', `/v1/sessions/${id}/fork`, { count: 2 }, 403, 'EXEC_ERR_TOKEN_SCOPE'],
    ['POST', '/mcp', {}, 403, 'EXEC_ERR_TOKEN_SCOPE'],
    // Escaped spellings reach the same routes: judged as the routes they reach.
    ['POST', `/v1/sessions/${id}/%74okens`, { access: 'full' }, 403, 'EXEC_ERR_TOKEN_SCOPE'],
    ['DELETE', `/v1/sessions/${id}/%74okens/tok_x`, undefined, 403, 'EXEC_ERR_TOKEN_SCOPE'],
    ['POST', `/v1/sessions/${id}/%66ork`, { count: 2 }, 403, 'EXEC_ERR_TOKEN_SCOPE'],
    ['GET', `/v1/sessions/${encodeURIComponent(otherId).replace('-', '%2D')}`, undefined, 403, 'EXEC_ERR_TOKEN_SCOPE'],
  ];
  for (const [method, path, body, status, c] of refused) {
    const r = await api(method, path, body, tok.token);
    assert.equal(r.status, status, `${method} ${path}`);
    assert.equal(r.body.code, c, `${method} ${path}`);
  }
  assert.equal(
    (await api('GET', `/v1/sessions/${otherId}`, undefined, ACME)).status,
    200,
    'the other session is intact',
  );

  // WebSocket: only initialize resuming this session.
  const fresh = await ws(t, api, tok.token);
  await assert.rejects(fresh.request('initialize', { clientName: 't' }), code('EXEC_ERR_TOKEN_SCOPE'));
  await assert.rejects(
    fresh.request('initialize', { clientName: 't', resumeSessionId: otherId }),
    code('EXEC_ERR_TOKEN_SCOPE'),
  );
  const init = await fresh.request('initialize', { clientName: 't', resumeSessionId: id });
  assert.equal(init['sessionId'], id);
  fresh.notify('initialized', {});
  await fresh.request('process/start', { processId: 'p1', argv: ['cat', 'a.txt'] });
  const read = await fresh.request<{ chunks: Array<{ chunk: string }>; exited: boolean }>('process/read', {
    processId: 'p1',
    afterSeq: 0,
    waitMs: 5000,
  });
  assert.match(read.chunks.map((c) => Buffer.from(c.chunk, 'base64').toString()).join(''), /hello/);
  // A fork creates sessions: a tenant token's call.
  await assert.rejects(fresh.request('session/fork', { count: 1 }), code('EXEC_ERR_TOKEN_SCOPE'));

  // The tenant token of another tenant still sees nothing; a session token of one tenant never
  // reaches another tenant's session.
  assert.equal((await api('GET', `/v1/sessions/${id}`, undefined, 'tenant-secret-other')).status, 404);
});

test('a read token attaches, replays output and reads files, and changes nothing', async (t) => {
  const api = await serverWithApi(t, { flags: TOKENS });
  const id = await newSession(api, {}, ACME);
  const workdir = (await api<{ workdir: string }>('GET', `/v1/sessions/${id}`, undefined, ACME)).body.workdir;
  const owner = await ws(t, api, ACME);
  await owner.request('initialize', { clientName: 'owner', resumeSessionId: id });
  owner.notify('initialized', {});
  await fetch(`${api.server.httpUrl}/v1/sessions/${id}/files/content?path=${workdir}/notes.txt`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${ACME}`, 'content-type': 'application/octet-stream' },
    body: 'plan',
  });
  await owner.request('process/start', { processId: 'echo', argv: ['sh', '-c', 'echo replay-me'] });
  const tok = await mint(api, id, { access: 'read' });
  assert.equal(tok.access, 'read');

  assert.equal((await api('GET', `/v1/sessions/${id}`, undefined, tok.token)).status, 200);
  const file = await fetch(`${api.server.httpUrl}/v1/sessions/${id}/files/content?path=${workdir}/notes.txt`, {
    headers: { authorization: `Bearer ${tok.token}` },
  });
  assert.equal(file.status, 200);
  assert.equal(await file.text(), 'plan');
  const writes: Array<[string, string, unknown]> = [
    ['DELETE', `/v1/sessions/${id}`, undefined],
    ['POST', `/v1/sessions/${id}/exec_command`, { cmd: 'touch x' }],
    ['POST', `/v1/sessions/${id}/snapshots`, {}],
    ['POST', `/v1/sessions/${id}/hibernate`, undefined],
    ['POST', `/v1/sessions/${id}/files/mkdir`, { path: `${workdir}/d` }],
    ['DELETE', `/v1/sessions/${id}/files?path=${workdir}/notes.txt`, undefined],
    ['POST', `/v1/sessions/${id}/approvals/appr_x`, { decision: 'approved' }],
    ['POST', `/v1/sessions/${id}/ports`, { port: 8080 }],
  ];
  for (const [method, path, body] of writes) {
    const r = await api(method, path, body, tok.token);
    assert.equal(r.status, 403, `${method} ${path}`);
    assert.equal(r.body.code, 'EXEC_ERR_TOKEN_READ_ONLY', `${method} ${path}`);
  }
  const put = await fetch(`${api.server.httpUrl}/v1/sessions/${id}/files/content?path=${workdir}/notes.txt`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${tok.token}`, 'content-type': 'application/octet-stream' },
    body: 'overwritten',
  });
  assert.equal(put.status, 403);

  const reader = await ws(t, api, tok.token);
  const init = await reader.request('initialize', { clientName: 'viewer', resumeSessionId: id });
  assert.equal(init['sessionId'], id);
  reader.notify('initialized', {});
  const list = await reader.request<{ processes: Array<{ processId: string }> }>('process/list', {});
  assert.ok(list.processes.some((p) => p.processId === 'echo'));
  const replay = await reader.request<{ chunks: Array<{ chunk: string }> }>('process/read', {
    processId: 'echo',
    afterSeq: 0,
    waitMs: 5000,
  });
  assert.match(replay.chunks.map((c) => Buffer.from(c.chunk, 'base64').toString()).join(''), /replay-me/);
  const refused: Array<[string, Record<string, unknown>]> = [
    ['process/start', { processId: 'x', argv: ['true'] }],
    ['process/write', { processId: 'echo', chunk: 'eA==' }],
    ['process/signal', { processId: 'echo', signal: 'SIGTERM' }],
    ['process/terminate', { processId: 'echo' }],
    ['process/resize', { processId: 'echo', size: { rows: 10, cols: 10 } }],
    ['fs/writeFile', { path: '/tmp/x', dataBase64: 'eA==' }],
    ['fs/remove', { path: '/tmp/x' }],
    ['session/snapshot', {}],
    ['session/terminateAll', {}],
  ];
  for (const [method, params] of refused)
    await assert.rejects(reader.request(method, params), code('EXEC_ERR_TOKEN_READ_ONLY'), method);
  // The owner is still the session's client (a read token only observes).
  const info = await api<{ attached: boolean }>('GET', `/v1/sessions/${id}`, undefined, ACME);
  assert.equal(info.body.attached, true);
  assert.equal((await api('GET', `/v1/sessions/${id}`, undefined, ACME)).status, 200, 'not deleted');
});

test('expiry, the TTL bound, revocation (live connections too) and deletion of the session', async (t) => {
  const api = await serverWithApi(t, { flags: [...TOKENS, '--session-token-max-ttl-seconds', '600'] });
  const id = await newSession(api, {}, ACME);
  const tooLong = await api('POST', `/v1/sessions/${id}/tokens`, { ttlSeconds: 601 }, ACME);
  assert.equal(tooLong.status, 400);
  assert.equal(tooLong.body.code, 'EXEC_ERR_INVALID_PARAMS');
  const bad = await api('POST', `/v1/sessions/${id}/tokens`, { access: 'admin' }, ACME);
  assert.equal(bad.status, 400);

  // 2 s: expiry is a whole second, so a 1 s token minted late in a second can lapse before the
  // first GET. A 2 s one ends at most 2 s after its minting, so 2.1 s after that GET it has.
  const short = await mint(api, id, { ttlSeconds: 2 });
  assert.equal((await api('GET', `/v1/sessions/${id}`, undefined, short.token)).status, 200);
  await new Promise((r) => setTimeout(r, 2100));
  const expired = await api('GET', `/v1/sessions/${id}`, undefined, short.token);
  assert.equal(expired.status, 401);
  assert.equal(expired.body.code, 'EXEC_ERR_TOKEN_EXPIRED');

  const a = await mint(api, id);
  const b = await mint(api, id);
  const live = await ws(t, api, a.token);
  await live.request('initialize', { clientName: 't', resumeSessionId: id });
  live.notify('initialized', {});
  const closed = new Promise<void>((resolve) => live.onClose(() => resolve()));
  assert.equal((await api('DELETE', `/v1/sessions/${id}/tokens/${a.tokenId}`, undefined, ACME)).status, 204);
  const revoked = await api('GET', `/v1/sessions/${id}`, undefined, a.token);
  assert.equal(revoked.status, 401);
  assert.equal(revoked.body.code, 'EXEC_ERR_TOKEN_REVOKED');
  await closed;
  assert.equal((await api('GET', `/v1/sessions/${id}`, undefined, b.token)).status, 200, 'other tokens stay valid');
  // A session token cannot revoke tokens.
  assert.equal((await api('DELETE', `/v1/sessions/${id}/tokens/${a.tokenId}`, undefined, b.token)).status, 403);
  // Forged: the payload of b with another session id, its MAC kept.
  const [, payload, mac] = b.token.split('.');
  const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString()) as Record<string, unknown>;
  const forged = `est1.${Buffer.from(JSON.stringify({ ...claims, a: 'full', e: 9_999_999_999 })).toString('base64url')}.${mac}`;
  const f = await api('GET', `/v1/sessions/${id}`, undefined, forged);
  assert.equal(f.status, 401);
  assert.equal(f.body.code, 'EXEC_ERR_UNAUTHORIZED');

  assert.equal((await api('DELETE', `/v1/sessions/${id}`, undefined, ACME)).status, 204);
  const gone = await api('GET', `/v1/sessions/${id}`, undefined, b.token);
  assert.equal(gone.status, 401);
  assert.equal(gone.body.code, 'EXEC_ERR_TOKEN_REVOKED');
});

test('a replica with the same tenant tokens verifies the token; one with other tokens does not', async (t) => {
  const api = await serverWithApi(t, { flags: TOKENS });
  const id = await newSession(api, {}, ACME);
  const tok = await mint(api, id);
  const same = await startServer({ flags: TOKENS });
  t.after(() => same.close());
  // Verified (not 401 UNAUTHORIZED): the session is not on this replica, which it says.
  const there = await requestJson(`${same.httpUrl}/v1/sessions/${id}`, 'GET', undefined, tok.token);
  assert.equal(there.status, 401);
  assert.equal((there.body as { code: string }).code, 'EXEC_ERR_TOKEN_REVOKED');
  const elsewhere = await startServer({ flags: ['--tokens', 'acme:rotated'] });
  t.after(() => elsewhere.close());
  const r = await requestJson(`${elsewhere.httpUrl}/v1/sessions/${id}`, 'GET', undefined, tok.token);
  assert.equal(r.status, 401);
  assert.equal((r.body as { code: string }).code, 'EXEC_ERR_UNAUTHORIZED');
  // An explicit --session-token-secret on both sides wins over the tenant tokens.
  const s1 = await startServer({ flags: [...TOKENS, '--session-token-secret', 'shared-key'] });
  t.after(() => s1.close());
  const s2 = await startServer({ flags: ['--tokens', 'acme:different', '--session-token-secret', 'shared-key'] });
  t.after(() => s2.close());
  const sid = (await requestJson<{ sessionId: string }>(`${s1.httpUrl}/v1/sessions`, 'POST', {}, ACME)).body.sessionId;
  const st = (await requestJson<SessionToken>(`${s1.httpUrl}/v1/sessions/${sid}/tokens`, 'POST', {}, ACME)).body;
  const v = await requestJson(`${s2.httpUrl}/v1/sessions/${sid}`, 'GET', undefined, st.token);
  assert.equal((v.body as { code: string }).code, 'EXEC_ERR_TOKEN_REVOKED', 'verified on s2, session not there');
});

test('SDK: session.createToken hands out a read token; the viewer reads, cannot run, and is cut on revoke', async (t) => {
  const api = await serverWithApi(t, { flags: TOKENS });
  const owner = await ExecServerClient.connect(api.server.url, { token: ACME });
  t.after(() => owner.deleteSession().catch(() => undefined));
  const done = await owner.exec(['sh', '-c', 'echo from-owner']);
  assert.equal((await done.wait()).stdout, 'from-owner\n');
  const tok = await owner.createToken({ access: 'read', ttlSeconds: 300 });
  assert.equal(tok.access, 'read');
  const viewer = await ExecServerClient.connect(api.server.url, { token: tok.token, resumeSessionId: owner.sessionId });
  t.after(() => viewer.disconnect().catch(() => undefined));
  assert.equal((await viewer.sessionInfo()).sessionId, owner.sessionId);
  assert.ok((await viewer.listProcesses()).length >= 1);
  await assert.rejects(viewer.exec(['true']), (err: RpcError) => err.code === 'EXEC_ERR_TOKEN_READ_ONLY');
  await assert.rejects(viewer.http.listSessions(), (err: { code?: string }) => err.code === 'EXEC_ERR_TOKEN_SCOPE');
  const cut = new Promise<void>((resolve) => viewer.onDisconnect(() => resolve()));
  await owner.revokeToken(tok.tokenId);
  await cut;
  await assert.rejects(
    ExecServerClient.connect(api.server.url, { token: tok.token, resumeSessionId: owner.sessionId }),
    (err: { code?: string }) => err.code === 'EXEC_ERR_TOKEN_REVOKED' || /401/.test(String(err)),
  );
});

test("preview URLs: a session token opens its session's exposed port (bearer or link), not another's", async (t) => {
  const api = await serverWithApi(t, { flags: TOKENS });
  const id = await newSession(api, { previewPorts: true }, ACME);
  const otherId = await newSession(api, {}, ACME);
  const root = (await api<{ workdir: string }>('GET', `/v1/sessions/${id}`, undefined, ACME)).body.workdir;
  await fetch(`${api.server.httpUrl}/v1/sessions/${id}/files/content?path=${root}/index.html`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${ACME}`, 'content-type': 'application/octet-stream' },
    body: 'shared preview',
  });
  const port = 19_000 + Math.floor(Math.random() * 1000);
  const started = await api(
    'POST',
    `/v1/sessions/${id}/exec_command`,
    {
      login: false,
      cmd: `busybox httpd -f -p 127.0.0.1:${port} -h ${root}`,
      yield_time_ms: 250,
    },
    ACME,
  );
  assert.ok(started.status === 200, JSON.stringify(started.body));
  assert.equal((await api('POST', `/v1/sessions/${id}/ports`, { port }, ACME)).status, 201);
  const read = await mint(api, id, { access: 'read' });
  const other = await mint(api, otherId);
  const path = `${api.server.httpUrl}/v1/sessions/${id}/ports/${port}/`;
  let page = await fetch(path, { headers: { authorization: `Bearer ${read.token}` } });
  for (let i = 0; i < 50 && page.status === 502; i++) {
    await new Promise((r) => setTimeout(r, 200));
    page = await fetch(path, { headers: { authorization: `Bearer ${read.token}` } });
  }
  assert.equal(page.status, 200);
  assert.equal(await page.text(), 'shared preview');
  assert.equal((await fetch(path, { headers: { authorization: `Bearer ${other.token}` } })).status, 401);
  // As a link: the token is traded for a cookie scoped to the port, and leaves the URL.
  const link = await fetch(`${path}?exec_preview_token=${encodeURIComponent(read.token)}`, { redirect: 'manual' });
  assert.equal(link.status, 302);
  const cookie = (link.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  assert.equal((await fetch(path, { headers: { cookie } })).status, 200);
  assert.equal((await api('DELETE', `/v1/sessions/${id}/tokens/${read.tokenId}`, undefined, ACME)).status, 204);
  assert.equal((await fetch(path, { headers: { cookie } })).status, 401);
  assert.equal((await fetch(path, { headers: { authorization: `Bearer ${read.token}` } })).status, 401);
});
