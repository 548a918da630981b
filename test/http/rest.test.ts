import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ErrorBody, SessionInfo } from '../../src/protocol/index.ts';
import { newSession, serverWithApi } from './helpers.ts';

/** The parts of the OpenAPI document the test reads. */
interface OpenApiResponse {
  readonly description: unknown;
  readonly content: Record<string, { readonly schema: { readonly required: string[] } } | undefined>;
}
interface OpenApiOperation {
  readonly operationId?: string;
  readonly parameters: ReadonlyArray<{ readonly in: string; readonly name: string; readonly required?: boolean }>;
  readonly responses: Record<string, OpenApiResponse | undefined>;
  readonly requestBody: {
    readonly content: Record<string, { readonly schema: { readonly properties: Record<string, unknown> } }>;
  };
}
interface OpenApiDocument {
  readonly openapi: string;
  readonly info: { readonly title: string; readonly version: unknown };
  readonly paths: Record<string, Record<string, OpenApiOperation | undefined> | undefined>;
  readonly components?: { readonly schemas?: Record<string, unknown> };
}

test('sessions: create, list, get, delete over real HTTP', async (t) => {
  const api = await serverWithApi(t);
  const created = await api<SessionInfo>('POST', '/v1/sessions', {
    labels: { purpose: 'rest-test' },
    sandbox: { type: 'read-only' },
  });
  assert.equal(created.status, 201);
  assert.match(created.body.sessionId, /^[0-9a-f-]{36}$/);
  assert.equal(created.body.backend, 'local');
  assert.deepEqual(created.body.sandbox, { type: 'read-only' });
  assert.deepEqual(created.body.labels, { purpose: 'rest-test' });
  const id = created.body.sessionId;

  const empty = await api<SessionInfo>('POST', '/v1/sessions');
  assert.equal(empty.status, 201, 'no body means all defaults');

  const list = await api<{ sessions: SessionInfo[] }>('GET', '/v1/sessions');
  assert.equal(list.status, 200);
  assert.deepEqual(new Set(list.body.sessions.map((s) => s.sessionId)), new Set([id, empty.body.sessionId]));

  const one = await api<SessionInfo>('GET', `/v1/sessions/${id}`);
  assert.equal(one.status, 200);
  assert.equal(one.body.sessionId, id);
  assert.equal(one.body.status, 'alive');
  assert.equal(one.body.attached, false);

  const del = await api('DELETE', `/v1/sessions/${id}`);
  assert.equal(del.status, 204);
  assert.equal((await api('GET', `/v1/sessions/${id}`)).status, 404);
  const again = await api('DELETE', `/v1/sessions/${id}`);
  assert.equal(again.status, 404);
  assert.equal(again.body.code, 'EXEC_ERR_SESSION_NOT_FOUND');
});

test('errors are JSON {code, message} with the right status', async (t) => {
  const api = await serverWithApi(t);
  const cases: Array<[string, string, unknown, number, string]> = [
    ['POST', '/v1/sessions', { sandbox: { type: 'bogus' } }, 400, 'EXEC_ERR_INVALID_PARAMS'],
    ['POST', '/v1/sessions', { unknownField: 1 }, 400, 'EXEC_ERR_INVALID_PARAMS'],
    ['POST', '/v1/sessions', '{not json', 400, 'EXEC_ERR_INVALID_REQUEST'],
    ['POST', '/v1/sessions', { maxLifetimeSeconds: 10_000_000 }, 400, 'EXEC_ERR_INVALID_PARAMS'],
    ['POST', '/v1/sessions', { env: { 'A=B': 'x' } }, 400, 'EXEC_ERR_INVALID_PARAMS'],
    ['POST', '/v1/sessions', { labels: { 'has space': 'x' } }, 400, 'EXEC_ERR_INVALID_PARAMS'],
    ['GET', '/v1/sessions/nope', undefined, 404, 'EXEC_ERR_SESSION_NOT_FOUND'],
    ['DELETE', '/v1/sessions/nope', undefined, 404, 'EXEC_ERR_SESSION_NOT_FOUND'],
    ['POST', '/v1/sessions/nope/snapshots', {}, 404, 'EXEC_ERR_SESSION_NOT_FOUND'],
    ['POST', '/v1/sessions/nope/exec_command', { cmd: 'true' }, 404, 'EXEC_ERR_SESSION_NOT_FOUND'],
    ['POST', '/v1/sessions/nope/write_stdin', { session_id: 1 }, 404, 'EXEC_ERR_SESSION_NOT_FOUND'],
    [
      'POST',
      '/v1/sessions/nope/tool-calls',
      { type: 'function_call', call_id: 'c', name: 'exec_command', arguments: '{}' },
      404,
      'EXEC_ERR_SESSION_NOT_FOUND',
    ],
    ['POST', '/v1/sessions/nope/approvals/x', { decision: 'approved' }, 404, 'EXEC_ERR_SESSION_NOT_FOUND'],
    ['GET', '/v1/sessions/nope/approvals', undefined, 404, 'EXEC_ERR_SESSION_NOT_FOUND'],
    ['DELETE', '/v1/snapshots/nope', undefined, 404, 'EXEC_ERR_NOT_FOUND'],
    ['GET', '/v1/nothing-here', undefined, 404, 'EXEC_ERR_NOT_FOUND'],
  ];
  for (const [method, path, body, status, code] of cases) {
    const r = await api<ErrorBody>(method, path, body);
    assert.equal(r.status, status, `${method} ${path}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.code, code, `${method} ${path}`);
    assert.equal(typeof r.body.message, 'string');
    assert.ok(r.body.message.length > 0);
    assert.match(r.headers.get('content-type') ?? '', /application\/json/);
  }
  const id = await newSession(api);
  const bad: Array<[string, unknown, RegExp]> = [
    [`/v1/sessions/${id}/exec_command`, {}, /cmd/],
    [`/v1/sessions/${id}/exec_command`, { cmd: 'true', yield_time_ms: 'soon' }, /yield_time_ms/],
    [`/v1/sessions/${id}/exec_command`, { cmd: 'true', sandbox_permissions: 'sudo' }, /sandbox_permissions/],
    // A NUL would end the command line there: refused, not cut.
    [`/v1/sessions/${id}/exec_command`, { cmd: 'echo a\u0000; rm x' }, /cmd must not contain a NUL byte/],
    [`/v1/sessions/${id}/write_stdin`, { chars: 'x' }, /session_id/],
    [`/v1/sessions/${id}/approvals/x`, { decision: 'maybe' }, /decision/],
  ];
  for (const [path, body, field] of bad) {
    const r = await api<ErrorBody>('POST', path, body);
    assert.equal(r.status, 400, `${path} ${JSON.stringify(body)}`);
    assert.equal(r.body.code, 'EXEC_ERR_INVALID_PARAMS');
    assert.match(r.body.message, field);
  }
  const unknownApproval = await api('POST', `/v1/sessions/${id}/approvals/appr_missing`, { decision: 'approved' });
  assert.equal(unknownApproval.status, 404);
  assert.equal(unknownApproval.body.code, 'EXEC_ERR_APPROVAL_NOT_FOUND');
  assert.deepEqual((await api('GET', `/v1/sessions/${id}/approvals`)).body, { approvals: [] });
});

test('snapshots on the local backend: clear 501, empty list, 404 on delete', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api);
  const snap = await api('POST', `/v1/sessions/${id}/snapshots`, { name: 'snap1' });
  assert.equal(snap.status, 501);
  assert.equal(snap.body.code, 'EXEC_ERR_UNSUPPORTED');
  const badName = await api('POST', `/v1/sessions/${id}/snapshots`, { name: 'no spaces allowed' });
  assert.equal(badName.status, 400);
  const list = await api('GET', '/v1/snapshots');
  assert.equal(list.status, 200);
  assert.deepEqual(list.body, { snapshots: [] });
  const del = await api('DELETE', '/v1/snapshots/whatever');
  assert.equal(del.status, 404);
});

test('a token is required on every route but health; 401 is JSON', async (t) => {
  const api = await serverWithApi(t, { flags: ['--token', 'sekrit'] });
  for (const [method, path] of [
    ['GET', '/v1/sessions'],
    ['POST', '/v1/sessions'],
    ['GET', '/v1/snapshots'],
    ['GET', '/docs/openapi.json'],
    ['POST', '/v1/sessions/x/exec_command'],
  ] as const) {
    const r = await api(method, path, method === 'POST' ? {} : undefined);
    assert.equal(r.status, 401, `${method} ${path}`);
    assert.equal(r.body.code, 'EXEC_ERR_UNAUTHORIZED');
    const wrong = await api(method, path, method === 'POST' ? {} : undefined, 'wrong');
    assert.equal(wrong.status, 401);
  }
  assert.equal((await api('GET', '/healthz')).status, 200);
  assert.equal((await api('GET', '/v1/sessions', undefined, 'sekrit')).status, 200);
});

test('session quotas answer 429 EXEC_ERR_SESSION_LIMIT (per tenant and per server)', async (t) => {
  const api = await serverWithApi(t, {
    flags: ['--tokens', 'alice:A,bob:B', '--max-sessions-per-tenant', '2', '--max-sessions', '3'],
  });
  await newSession(api, {}, 'A');
  await newSession(api, {}, 'A');
  const third = await api<ErrorBody>('POST', '/v1/sessions', {}, 'A');
  assert.equal(third.status, 429);
  assert.equal(third.body.code, 'EXEC_ERR_SESSION_LIMIT');
  assert.match(third.body.message, /quota reached: 2 of 2/);
  await newSession(api, {}, 'B');
  const server = await api<ErrorBody>('POST', '/v1/sessions', {}, 'B');
  assert.equal(server.status, 429);
  assert.match(server.body.message, /server session limit/);
});

test('the OpenAPI document is generated from the route schemas and lists every route', async (t) => {
  const api = await serverWithApi(t);
  const r = await api<OpenApiDocument>('GET', '/docs/openapi.json');
  assert.equal(r.status, 200);
  const doc = r.body;
  assert.match(doc.openapi, /^3\.\d+\.\d+$/);
  assert.equal(doc.info.title, 'exec-server');
  assert.equal(typeof doc.info.version, 'string');
  const expected: Record<string, string[]> = {
    '/v1/sessions': ['post', 'get'],
    '/v1/sessions/{id}': ['get', 'delete'],
    '/v1/sessions/{id}/snapshots': ['post'],
    '/v1/snapshots': ['get'],
    '/v1/snapshots/{id}': ['delete'],
    '/v1/sessions/{id}/exec_command': ['post'],
    '/v1/sessions/{id}/write_stdin': ['post'],
    '/v1/sessions/{id}/approvals': ['get'],
    '/v1/sessions/{id}/approvals/{approvalId}': ['post'],
    '/v1/sessions/{id}/tool-calls': ['post'],
  };
  const operationIds = new Set<string>();
  for (const [path, methods] of Object.entries(expected)) {
    assert.ok(doc.paths[path], `path ${path} listed`);
    for (const m of methods) {
      const op: OpenApiOperation | undefined = doc.paths[path]?.[m];
      assert.ok(op, `${m} ${path} listed`);
      assert.ok(op.operationId && !operationIds.has(op.operationId), `${m} ${path} has a unique operationId`);
      operationIds.add(op.operationId);
      assert.ok(Object.keys(op.responses ?? {}).length >= 2, `${m} ${path} documents its responses`);
      for (const [status, resp] of Object.entries(op.responses)) {
        assert.match(status, /^[1-5]\d\d$/);
        assert.equal(typeof resp?.description, 'string');
      }
      if (path.includes('{id}'))
        assert.ok(
          op.parameters.some((p) => p.in === 'path' && p.name === 'id' && p.required),
          `${m} ${path} documents :id`,
        );
      const error: OpenApiResponse | undefined = op.responses['404'] ?? op.responses['400'];
      assert.ok(error, `${m} ${path} documents an error`);
      const schema: { readonly required: string[] } | undefined = error.content['application/json']?.schema;
      assert.ok(schema, `${m} ${path} documents a JSON error`);
      assert.deepEqual([...schema.required].sort(), ['code', 'message']);
    }
  }
  // Every $ref resolves, hidden routes stay out, and the document is plain JSON.
  const text = JSON.stringify(doc);
  for (const m of text.matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g))
    assert.ok(doc.components?.schemas?.[m[1]!], `ref ${m[1]} resolves`);
  assert.equal(doc.paths['/healthz'], undefined);
  assert.equal(doc.paths['/docs/openapi.json'], undefined);
  assert.ok(doc.paths['/v1/sessions']?.['post']?.requestBody.content['application/json']?.schema.properties['sandbox']);
});
