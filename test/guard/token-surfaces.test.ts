/**
 * Session tokens on the surfaces around a session's own routes, against a real server (local
 * backend): a URL whose fragment spells a preview path is judged as the route it reaches (the
 * router ends a path at `#`); the tenant-wide routes (image pulls, batch create, snapshots, the
 * API document, MCP and an MCP connection a tenant token opened) and the tool facade of another
 * session refuse a session token; a read token changes nothing through the tool facade, the
 * ports or the files; the signed preview URLs a session token gets are bound to it (they expire
 * with it and end at its revocation).
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { test } from 'node:test';
import { RpcConnection } from '../../src/client/rpc-connection.ts';
import type { PreviewAnswer, SessionToken } from '../../src/protocol/index.ts';
import { mcpInitialize, newSession, serverWithApi, type Api } from '../http/helpers.ts';

const TENANT = 'tenant-secret-default';
const ACME = 'tenant-secret-acme';

async function mint(api: Api, id: string, tenantToken: string, access: 'full' | 'read'): Promise<SessionToken> {
  const r = await api<SessionToken>('POST', `/v1/sessions/${id}/tokens`, { access }, tenantToken);
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body;
}

/**
 * One request sent as written: `fetch` drops a URL's fragment, a raw HTTP client does not.
 * Answers the status and the error code, if any.
 */
function raw(base: string, method: string, path: string, token?: string): Promise<{ status: number; code?: string }> {
  const url = new URL(base);
  const headers = token === undefined ? {} : { authorization: `Bearer ${token}` };
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, method, path, headers }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => {
        text += c.toString();
      });
      res.on('end', () => {
        let code: string | undefined;
        try {
          code = (JSON.parse(text) as { code?: string }).code;
        } catch {
          // Not JSON: no code.
        }
        resolve({ status: res.statusCode ?? 0, ...(code === undefined ? {} : { code }) });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

test('a fragment that spells a preview path does not pass a session route off as the proxy', async (t) => {
  const api = await serverWithApi(t, { flags: ['--token', TENANT] });
  const id = await newSession(api, {}, TENANT);
  const otherId = await newSession(api, {}, TENANT);
  const read = await mint(api, id, TENANT, 'read');
  const other = await mint(api, otherId, TENANT, 'full');
  // `/v1/sessions/ID#/ports/1/x` reaches `/v1/sessions/:id` (the router stops at `#`).
  const disguised = `/v1/sessions/${id}#/ports/1/x`;
  const cases: Array<[string, string | undefined, number, string]> = [
    ['GET', undefined, 401, 'EXEC_ERR_UNAUTHORIZED'],
    ['DELETE', undefined, 401, 'EXEC_ERR_UNAUTHORIZED'],
    ['DELETE', read.token, 403, 'EXEC_ERR_TOKEN_READ_ONLY'],
    ['GET', other.token, 403, 'EXEC_ERR_TOKEN_SCOPE'],
    ['DELETE', other.token, 403, 'EXEC_ERR_TOKEN_SCOPE'],
  ];
  for (const [method, token, status, code] of cases) {
    const r = await raw(api.server.httpUrl, method, disguised, token);
    assert.deepEqual(r, { status, code }, `${method} ${disguised} as ${token === undefined ? 'nobody' : 'a token'}`);
  }
  assert.equal((await api('GET', `/v1/sessions/${id}`, undefined, TENANT)).status, 200, 'the session is intact');
  // A fragment after the port is still the proxy's, which authenticates the request itself.
  const proxied = await raw(api.server.httpUrl, 'GET', `/v1/sessions/${id}/ports/1/x#y`);
  assert.deepEqual(proxied, { status: 401, code: 'EXEC_ERR_UNAUTHORIZED' });
  assert.equal((await raw(api.server.httpUrl, 'GET', `/v1/sessions/${id}/ports/1/x#y`, read.token)).status, 404);
});

test("tenant-wide routes, MCP and another session's tool facade refuse a session token", async (t) => {
  const api = await serverWithApi(t, { flags: ['--tokens', `acme:${ACME}`] });
  const id = await newSession(api, {}, ACME);
  const otherId = await newSession(api, {}, ACME);
  const init = await mcpInitialize(api.server.httpUrl, { client: 't', token: ACME });
  assert.equal(init.status, 200);
  const mcpSession = init.headers.get('mcp-session-id') ?? '';
  await init.body?.cancel();
  for (const access of ['full', 'read'] as const) {
    const tok = (await mint(api, id, ACME, access)).token;
    const refused: Array<[string, string, unknown]> = [
      ['GET', '/v1/images/pulls', undefined],
      ['POST', '/v1/sessions?count=2', {}],
      ['DELETE', '/v1/snapshots/snap-1', undefined],
      ['GET', '/docs/openapi.json', undefined],
      ['GET', '/mcp', undefined],
      ['DELETE', '/mcp', undefined],
      ['POST', `/v1/sessions/${id}/mcp-call`, { name: 'create_session', arguments: {} }],
      ['POST', `/v1/sessions/${otherId}/exec_command`, { cmd: 'true' }],
      ['POST', `/v1/sessions/${otherId}/write_stdin`, { session_id: 1 }],
      ['GET', `/v1/sessions/${otherId}/approvals`, undefined],
      ['POST', `/v1/sessions/${otherId}/approvals/appr_x`, { decision: 'approved' }],
      ['POST', `/v1/sessions/${otherId}/ports`, { port: 8080 }],
    ];
    for (const [method, path, body] of refused) {
      const r = await api<{ code: string }>(method, path, body, tok);
      assert.equal(r.status, 403, `${access}: ${method} ${path}`);
      assert.equal(r.body.code, 'EXEC_ERR_TOKEN_SCOPE', `${access}: ${method} ${path}`);
    }
    // The tenant's MCP connection, named by its id, is not the session token's either.
    const mcp = await fetch(`${api.server.httpUrl}/mcp`, {
      headers: { authorization: `Bearer ${tok}`, 'mcp-session-id': mcpSession, accept: 'text/event-stream' },
    });
    assert.equal(mcp.status, 403, access);
    await mcp.body?.cancel();
  }
  assert.equal((await api<{ sessions: unknown[] }>('GET', '/v1/sessions', undefined, ACME)).body.sessions.length, 2);
});

test('a read token changes nothing through the tool facade, the ports or the files', async (t) => {
  const api = await serverWithApi(t, { flags: ['--tokens', `acme:${ACME}`] });
  const id = await newSession(api, {}, ACME);
  const workdir = (await api<{ workdir: string }>('GET', `/v1/sessions/${id}`, undefined, ACME)).body.workdir;
  const tok = (await mint(api, id, ACME, 'read')).token;
  const writes: Array<[string, string, unknown]> = [
    ['POST', `/v1/sessions/${id}/write_stdin`, { session_id: 1, chars: 'x' }],
    [
      'POST',
      `/v1/sessions/${id}/tool-calls`,
      { type: 'function_call', name: 'exec_command', call_id: 'c', arguments: '{"cmd":"true"}' },
    ],
    ['POST', `/v1/sessions/${id}/wake`, undefined],
    ['DELETE', `/v1/sessions/${id}/ports/8080`, undefined],
    ['POST', `/v1/sessions/${id}/files/copy`, { from: `${workdir}/a`, to: `${workdir}/b` }],
  ];
  for (const [method, path, body] of writes) {
    const r = await api<{ code: string }>(method, path, body, tok);
    assert.equal(r.status, 403, `${method} ${path}`);
    assert.equal(r.body.code, 'EXEC_ERR_TOKEN_READ_ONLY', `${method} ${path}`);
  }
  // What it may do: read the approvals queue.
  assert.equal((await api('GET', `/v1/sessions/${id}/approvals`, undefined, tok)).status, 200);
});

test('the signed preview URLs a session token gets expire with it and end at its revocation', async (t) => {
  const api = await serverWithApi(t, { flags: ['--tokens', `acme:${ACME}`] });
  const id = await newSession(api, { previewPorts: true }, ACME);
  const port = 19_000 + Math.floor(Math.random() * 1000);
  const byTenant = await api<PreviewAnswer>('POST', `/v1/sessions/${id}/ports`, { port }, ACME);
  assert.equal(byTenant.status, 201, JSON.stringify(byTenant.body));
  const read = await api<SessionToken>('POST', `/v1/sessions/${id}/tokens`, { access: 'read', ttlSeconds: 120 }, ACME);
  const full = await api<SessionToken>('POST', `/v1/sessions/${id}/tokens`, { access: 'full', ttlSeconds: 120 }, ACME);
  const listed = await api<{ ports: PreviewAnswer[] }>('GET', `/v1/sessions/${id}/ports`, undefined, read.body.token);
  const readLink = listed.body.ports[0];
  assert.ok(readLink !== undefined, JSON.stringify(listed.body));
  const exposed = await api<PreviewAnswer>(
    'POST',
    `/v1/sessions/${id}/ports`,
    { port, ttlSeconds: 86_400 },
    full.body.token,
  );
  assert.equal(exposed.status, 201, JSON.stringify(exposed.body));
  const conn = await RpcConnection.open(api.server.url, { token: full.body.token });
  t.after(() => conn.close());
  await conn.request('initialize', { clientName: 't', resumeSessionId: id });
  conn.notify('initialized', {});
  const overWs = await conn.request<PreviewAnswer>('session/exposePort', { port, ttlSeconds: 86_400 });
  for (const [who, link, token] of [
    ['read, listed', readLink, read.body],
    ['full, exposed', exposed.body, full.body],
    ['full, WebSocket', overWs, full.body],
  ] as const)
    assert.ok(
      Date.parse(link.expiresAt) <= Date.parse(token.expiresAt),
      `${who}: ${link.expiresAt} after ${token.expiresAt}`,
    );
  // Opened: the signed token is traded for the port's cookie (302); refused: 401.
  const open = async (signedPath: string) =>
    (await fetch(`${api.server.httpUrl}${signedPath}`, { redirect: 'manual' })).status;
  assert.equal(await open(readLink.signedPath), 302);
  assert.equal(await open(exposed.body.signedPath), 302);
  assert.equal((await api('DELETE', `/v1/sessions/${id}/tokens/${read.body.tokenId}`, undefined, ACME)).status, 204);
  assert.equal(await open(readLink.signedPath), 401, "the read token's link ends with it");
  assert.equal(await open(exposed.body.signedPath), 302, "another token's link does not");
  assert.equal((await api('DELETE', `/v1/sessions/${id}/tokens/${full.body.tokenId}`, undefined, ACME)).status, 204);
  assert.equal(await open(exposed.body.signedPath), 401);
  assert.equal(await open(overWs.signedPath), 401);
  assert.equal(await open(byTenant.body.signedPath), 302, "the tenant's link is no token's");
});
