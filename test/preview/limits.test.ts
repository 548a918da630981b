/**
 * Preview ports refuse bad input with clear errors on every way in (HTTP, JSON-RPC, MCP): a
 * port out of range or not a number, too many ports; a port exposed again answers as it did
 * (same port, same exposedAt, a fresh signed path). A signed URL the server issued stops
 * opening the port when it expires, and so does the cookie it was traded for.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { PreviewAnswer, SessionInfo } from '../../src/protocol/index.ts';
import { requestJson } from '../http/helpers.ts';
import { call, mcpClient, textOf } from '../mcp/helpers.ts';
import { serverFor, sessionFor, sleep } from '../support/harness.ts';

const TOKEN = 'limits-token';

/** The `data.code` of a JSON-RPC error, for assert.rejects. */
function rpcCode(code: string, message: RegExp): (err: unknown) => boolean {
  return (err) => {
    const e = err as { message?: string; data?: { code?: string } };
    assert.equal(e.data?.code, code, JSON.stringify(e));
    assert.match(e.message ?? '', message);
    return true;
  };
}

test('preview ports: bad ports, a port exposed twice and too many ports, over HTTP, JSON-RPC and MCP', {
  timeout: 60_000,
}, async (t) => {
  const server = await serverFor(t, { flags: ['--token', TOKEN, '--preview-max-ports', '2'] });
  const base = server.httpUrl;
  const post = (id: string, body: unknown) =>
    requestJson<PreviewAnswer>(`${base}/v1/sessions/${id}/ports`, 'POST', body, TOKEN);
  const id = (await requestJson<SessionInfo>(`${base}/v1/sessions`, 'POST', { previewPorts: true }, TOKEN)).body
    .sessionId;

  for (const [body, message] of [
    [{ port: 0 }, 'body/port must be >= 1'],
    [{ port: 70_000 }, 'body/port must be <= 65535'],
    [{ port: 'abc' }, 'body/port must be integer'],
    [{ port: 80.5 }, 'body/port must be integer'],
    [{}, 'body must have required properties port'],
    [{ port: 3000, ttlSeconds: 1 }, 'body/ttlSeconds must be >= 10'],
  ] as const) {
    const r = await post(id, body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.deepEqual(r.body, { code: 'EXEC_ERR_INVALID_PARAMS', message }, JSON.stringify(body));
  }
  const bare = await requestJson(`${base}/v1/sessions/${id}/ports/abc`, 'DELETE', undefined, TOKEN);
  assert.equal(bare.status, 400);
  assert.equal(bare.body.code, 'EXEC_ERR_INVALID_PARAMS');

  // Exposed twice: the same port as before, not a second one.
  const first = await post(id, { port: 3000 });
  assert.equal(first.status, 201);
  const again = await post(id, { port: 3000 });
  assert.equal(again.status, 201);
  assert.equal(again.body.exposedAt, first.body.exposedAt);
  assert.equal(again.body.path, first.body.path);
  assert.equal((await post(id, { port: 3001 })).status, 201);
  const tooMany = await post(id, { port: 3002 });
  assert.equal(tooMany.status, 429);
  assert.deepEqual(tooMany.body, { code: 'EXEC_ERR_PROCESS_LIMIT', message: 'a session exposes at most 2 ports' });
  // Closing one makes room again.
  assert.equal((await requestJson(`${base}/v1/sessions/${id}/ports/3001`, 'DELETE', undefined, TOKEN)).status, 204);
  assert.equal((await post(id, { port: 3002 })).status, 201);
  // Another session has its own ports.
  const other = (await requestJson<SessionInfo>(`${base}/v1/sessions`, 'POST', { previewPorts: true }, TOKEN)).body
    .sessionId;
  assert.equal((await post(other, { port: 3003 })).status, 201);

  // JSON-RPC: the same checks, the registry's codes.
  const session = await sessionFor(t, server.url, { session: { previewPorts: true } }, { token: TOKEN });
  const expose = (params: unknown) => session.request('session/exposePort', params);
  await assert.rejects(expose({ port: 0 }), rpcCode('EXEC_ERR_INVALID_PARAMS', /port: must be >= 1/));
  await assert.rejects(expose({ port: 70_000 }), rpcCode('EXEC_ERR_INVALID_PARAMS', /port: must be <= 65535/));
  await assert.rejects(expose({ port: 'x' }), rpcCode('EXEC_ERR_INVALID_PARAMS', /port: must be integer/));
  await assert.rejects(expose({}), rpcCode('EXEC_ERR_INVALID_PARAMS', /port/));
  const a = await expose({ port: 5000 });
  assert.equal((await expose({ port: 5000 }))['exposedAt'], a['exposedAt']);
  await expose({ port: 5001 });
  await assert.rejects(expose({ port: 5002 }), rpcCode('EXEC_ERR_PROCESS_LIMIT', /at most 2 ports/));
  assert.deepEqual(await session.request('session/closePort', { port: 5001 }), { closed: true });
  assert.deepEqual(await session.request('session/closePort', { port: 5001 }), { closed: false });

  // MCP: tool errors a model can read.
  const { client } = await mcpClient(t, base, { token: TOKEN });
  await call(client, 'create_session', { previewPorts: true });
  for (const [port, message] of [
    [0, '/port must be >= 1'],
    [70_000, '/port must be <= 65535'],
    ['x', '/port must be integer'],
  ] as const) {
    const r = await call(client, 'expose_port', { port });
    assert.equal(r.isError, true);
    assert.equal(textOf(r), `expose_port failed: invalid arguments: ${message} (EXEC_ERR_INVALID_PARAMS)`);
  }
  const m1 = await call<PreviewAnswer>(client, 'expose_port', { port: 6000 });
  const m2 = await call<PreviewAnswer>(client, 'expose_port', { port: 6000 });
  assert.equal(m2.structuredContent?.exposedAt, m1.structuredContent?.exposedAt);
  await call(client, 'expose_port', { port: 6001 });
  const full = await call(client, 'expose_port', { port: 6002 });
  assert.equal(full.isError, true);
  assert.equal(textOf(full), 'expose_port failed: a session exposes at most 2 ports (EXEC_ERR_PROCESS_LIMIT)');
});

test('preview ports: a signed URL the server issued, and the cookie it gave, stop working when it expires', {
  timeout: 60_000,
}, async (t) => {
  const server = await serverFor(t, { flags: ['--token', TOKEN] });
  const base = server.httpUrl;
  const id = (await requestJson<SessionInfo>(`${base}/v1/sessions`, 'POST', { previewPorts: true }, TOKEN)).body
    .sessionId;
  // The shortest validity there is; nothing needs to listen: a valid credential gets as far as
  // the port (502, nothing listens), an invalid one is 401 before it.
  const exposed = await requestJson<PreviewAnswer>(
    `${base}/v1/sessions/${id}/ports`,
    'POST',
    { port: 3999, ttlSeconds: 10 },
    TOKEN,
  );
  assert.equal(exposed.status, 201);
  const expiresAt = Date.parse(exposed.body.expiresAt);
  assert.ok(Math.abs(expiresAt - (Date.now() + 10_000)) < 2_000, exposed.body.expiresAt);
  const signed = await fetch(`${base}${exposed.body.signedPath}`, { redirect: 'manual' });
  assert.equal(signed.status, 302);
  const cookie = (signed.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  // The cookie lives no longer than the signature.
  const maxAge = Number(/; Max-Age=(\d+);/.exec(signed.headers.get('set-cookie') ?? '')?.[1]);
  assert.ok(maxAge > 0 && maxAge <= 10, String(maxAge));
  const withCookie = () => fetch(`${base}${exposed.body.path}`, { headers: { cookie }, redirect: 'manual' });
  assert.equal((await withCookie()).status, 502);

  await sleep(Math.max(0, expiresAt - Date.now()) + 1_000);
  const late = await fetch(`${base}${exposed.body.signedPath}`, { redirect: 'manual' });
  assert.equal(late.status, 401);
  assert.equal(((await late.json()) as { code: string }).code, 'EXEC_ERR_UNAUTHORIZED');
  assert.equal((await withCookie()).status, 401);
  // The port itself is still exposed: a signed path issued now opens it again.
  const listed = await requestJson<{ ports: PreviewAnswer[] }>(
    `${base}/v1/sessions/${id}/ports`,
    'GET',
    undefined,
    TOKEN,
  );
  const fresh = listed.body.ports[0]?.signedPath ?? '';
  assert.equal((await fetch(`${base}${fresh}`, { redirect: 'manual' })).status, 302);
});
