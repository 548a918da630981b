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
