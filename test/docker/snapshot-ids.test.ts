/**
 * A snapshot id the engine cannot even parse (a name past its 255 characters, within the API's
 * 512) is a snapshot that does not exist (404) on a real engine, not an engine failure (502,
 * which clients retry).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startServer } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';

async function call(base: string, method: string, path: string, body?: unknown) {
  const r = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, body: (text === '' ? {} : JSON.parse(text)) as Record<string, unknown> };
}

test('a snapshot id the engine cannot parse is not found, never a 502', dockerTestOptions, async (t) => {
  const server = await startServer({ backend: 'docker' });
  t.after(() => server.close());
  // Within the API's 512 characters, past the engine's 255 for a repository name.
  const long = 'a'.repeat(300);
  const del = await call(server.httpUrl, 'DELETE', `/v1/snapshots/${long}`);
  assert.equal(del.status, 404, JSON.stringify(del.body));
  assert.equal(del.body.code, 'EXEC_ERR_NOT_FOUND');
  const create = await call(server.httpUrl, 'POST', '/v1/sessions', { snapshot: long });
  assert.equal(create.status, 404, JSON.stringify(create.body));
  assert.equal(create.body.code, 'EXEC_ERR_NOT_FOUND');
  assert.deepEqual((await call(server.httpUrl, 'GET', '/v1/sessions')).body.sessions, []);
});
