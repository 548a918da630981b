/**
 * `network.allow` on a server of the local backend: a malformed entry is a 400 naming it, and a
 * valid list is refused (501 `EXEC_ERR_UNSUPPORTED`) rather than a session made without its
 * proxy: the local backend has no egress proxy yet (docs/architecture.md, "Egress").
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { serverWithApi } from './helpers.ts';

test('local backend: a bad network entry is 400 EXEC_ERR_INVALID_PARAMS; a valid list is 501, no session left', async (t) => {
  const api = await serverWithApi(t);
  const bad = await api('POST', '/v1/sessions', { network: { allow: ['10.0.0.0/40'] } });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.code, 'EXEC_ERR_INVALID_PARAMS');
  assert.match(String(bad.body.message), /session\.network\.allow\[0\] "10\.0\.0\.0\/40": prefix/);
  const extra = await api('POST', '/v1/sessions', { network: { allow: ['*'], deny: [] } });
  assert.equal(extra.status, 400, 'unknown fields are refused');
  const unsupported = await api('POST', '/v1/sessions', { network: { allow: ['example.com:443'] } });
  assert.equal(unsupported.status, 501);
  assert.equal(unsupported.body.code, 'EXEC_ERR_UNSUPPORTED');
  assert.match(String(unsupported.body.message), /network\.allow is not supported by this backend/);
  const list = await api<{ sessions: unknown[] }>('GET', '/v1/sessions');
  assert.equal(list.body.sessions.length, 0);
});
