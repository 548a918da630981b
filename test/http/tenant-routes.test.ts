/**
 * Another tenant's session does not exist, on every session route (issue 25, "What held"): the
 * routes are read from the server's own OpenAPI document, so a route added later is covered
 * without touching this test. For each one, bob's request for alice's session gets exactly the
 * answer of a request for a session that never existed (a 404, or the same validation error),
 * never a success, and alice's session is untouched afterwards. The preview proxy (hidden from
 * the document) is checked too.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import type { SessionInfo } from '../../src/protocol/index.ts';
import { newSession, requestJson, serverWithApi } from './helpers.ts';

type Schema = {
  type?: string;
  enum?: unknown[];
  const?: unknown;
  anyOf?: Schema[];
  oneOf?: Schema[];
  minimum?: number;
  pattern?: string;
  properties?: Record<string, Schema>;
  required?: string[];
};
type Operation = {
  parameters?: Array<{ in: string; name: string; required?: boolean; schema?: Schema }>;
  requestBody?: { content?: Record<string, { schema?: Schema }> };
};
type Paths = Record<string, Record<string, Operation>>;

/** A value the schema accepts (required members only), so the request gets past validation. */
function example(schema: Schema | undefined): unknown {
  if (schema === undefined) return 'x';
  if (schema.enum) return schema.enum[0];
  if (schema.const !== undefined) return schema.const;
  const first = schema.anyOf?.[0] ?? schema.oneOf?.[0];
  if (first) return example(first);
  switch (schema.type) {
    case 'object':
      return Object.fromEntries((schema.required ?? []).map((k) => [k, example(schema.properties?.[k])]));
    case 'integer':
    case 'number':
      return Math.max(schema.minimum ?? 1, 1);
    case 'boolean':
      return false;
    case 'array':
      return [];
    default:
      // Paths (the protocol's PathSchema) must be absolute.
      return schema.pattern?.startsWith('^(/') ? '/tmp/a.txt' : 'x';
  }
}

/** The required query of an operation, filled. */
function query(op: Operation): string {
  const q = new URLSearchParams();
  for (const p of op.parameters ?? []) if (p.in === 'query' && p.required) q.set(p.name, String(example(p.schema)));
  return q.size > 0 ? `?${q}` : '';
}

const PORT = 8080;

/** The path with its parameters filled: `{id}` the session, `{port}` an exposed port, others a placeholder. */
function fill(path: string, id: string): string {
  return path.replace(/\{([^}]+)\}/g, (_m, name: string) =>
    name === 'id' ? id : name === 'port' ? String(PORT) : name === '*' ? 'a.txt' : 'x',
  );
}

test('every session route answers another tenant as if the session never existed', {
  timeout: 60_000,
}, async (t) => {
  const api = await serverWithApi(t, { flags: ['--tokens', 'alice:A,bob:B'] });
  const id = await newSession(api, { previewPorts: true }, 'A');
  assert.equal((await api('POST', `/v1/sessions/${id}/ports`, { port: PORT }, 'A')).status, 201);
  const doc = await api<{ paths: Paths }>('GET', '/docs/openapi.json', undefined, 'A');
  assert.equal(doc.status, 200);
  const routes = Object.entries(doc.body.paths)
    .filter(([path]) => path.includes('{id}'))
    .flatMap(([path, ops]) => Object.entries(ops).map(([method, op]) => [method.toUpperCase(), path, op] as const));
  assert.ok(routes.length >= 15, `the document lists the session routes (${routes.length})`);
  const never = randomUUID();
  for (const [method, path, op] of routes) {
    const json = op.requestBody?.content?.['application/json']?.schema;
    const body = json !== undefined ? example(json) : ['POST', 'PUT', 'PATCH'].includes(method) ? {} : undefined;
    const theirs = await api(method, `${fill(path, id)}${query(op)}`, body, 'B');
    const none = await api(method, `${fill(path, never)}${query(op)}`, body, 'B');
    const where = `${method} ${path}`;
    assert.equal(theirs.status, 404, `${where}: ${JSON.stringify(theirs.body)}`);
    assert.equal(theirs.status, none.status, where);
    assert.deepEqual(
      JSON.parse(JSON.stringify(theirs.body).replaceAll(id, '<id>')),
      JSON.parse(JSON.stringify(none.body).replaceAll(never, '<id>')),
      where,
    );
  }
  // The preview proxy: bob's token does not open alice's port.
  const proxied = await requestJson(`${api.server.httpUrl}/v1/sessions/${id}/ports/${PORT}/`, 'GET', undefined, 'B');
  assert.equal(proxied.status, 404);
  // Alice's session is as it was.
  const info = await api<SessionInfo>('GET', `/v1/sessions/${id}`, undefined, 'A');
  assert.equal(info.status, 200);
  assert.equal(info.body.sessionId, id);
  const ports = await api<{ ports: Array<{ port: number }> }>('GET', `/v1/sessions/${id}/ports`, undefined, 'A');
  assert.deepEqual(
    ports.body.ports.map((p) => p.port),
    [PORT],
  );
});
