/** Session spec bounds the engine would otherwise get wrong, refused at the edge (src/protocol/session.ts). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { serverWithApi } from './helpers.ts';

test("cpus below the engine's smallest share (0.01) is a 400, not rounded to no limit", async (t) => {
  const api = await serverWithApi(t);
  for (const cpus of [1e-12, 0.0001, 0.009]) {
    const r = await api('POST', '/v1/sessions', { resources: { cpus } });
    assert.equal(r.status, 400, `${cpus}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.code, 'EXEC_ERR_INVALID_PARAMS');
    assert.match(String(r.body.message), /cpus/);
  }
  assert.equal((await api('POST', '/v1/sessions', { resources: { cpus: 0.01 } })).status, 201);
});

test('a session spec with more labels or environment variables than a map holds is a 400 naming it', async (t) => {
  const api = await serverWithApi(t);
  const many = (n: number, prefix: string) =>
    Object.fromEntries(Array.from({ length: n }, (_, i) => [`${prefix}${i}`, 'x']));
  for (const [field, body] of [
    ['labels', { labels: many(65, 'l') }],
    ['env', { env: many(4097, 'V') }],
  ] as const) {
    const r = await api('POST', '/v1/sessions', body);
    assert.equal(r.status, 400, `${field}: ${JSON.stringify(r.body).slice(0, 300)}`);
    assert.equal(r.body.code, 'EXEC_ERR_INVALID_PARAMS');
    assert.match(String(r.body.message), new RegExp(`${field}.*(64|4096)`));
  }
  assert.equal((await api('POST', '/v1/sessions', { labels: many(64, 'l'), env: many(4096, 'V') })).status, 201);
});
