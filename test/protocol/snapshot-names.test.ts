/**
 * Snapshot names (src/protocol/session.ts `SnapshotNameSchema`): an image tag's characters,
 * beginning with a letter or digit. `.`, `..` and names beginning with `.`, `-` or `_` are
 * refused at the edge, on JSON-RPC and HTTP alike, with the validator's "must match pattern"
 * naming the field; the names that pass get past validation (the local backend then answers
 * that it has no snapshots).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Value } from 'typebox/value';
import { SnapshotNameSchema } from '../../src/protocol/index.ts';
import { requestJson } from '../http/helpers.ts';
import { serverFor, sessionFor } from '../support/harness.ts';

const REFUSED = ['.', '..', '.hidden', '-rf', '--help', '_x', 'a/b', 'a:b', '', 'x'.repeat(129)];
const ACCEPTED = ['a', '0', 'v1.2', 'my_snap-2', 'a..b', 'x.', 'x-', `a${'_'.repeat(127)}`];

test('the schema refuses . and .. and names beginning with . - or _; image-tag names pass', () => {
  for (const name of REFUSED) assert.equal(Value.Check(SnapshotNameSchema, name), false, `accepted ${name}`);
  for (const name of ACCEPTED) assert.equal(Value.Check(SnapshotNameSchema, name), true, `refused ${name}`);
});

test('session/snapshot, session/fork and POST .../snapshots refuse such names as invalid params', async (t) => {
  const server = await serverFor(t);
  const s = await sessionFor(t, server.url);
  for (const name of ['.', '..', '-rf', '.hidden']) {
    for (const method of ['session/snapshot', 'session/fork']) {
      const err = await s.request(method, { name }).then(
        () => assert.fail(`${method} accepted ${name}`),
        (e: { message: string; data: { code: string; field: string } }) => e,
      );
      assert.equal(err.data.code, 'EXEC_ERR_INVALID_PARAMS', `${method} ${name}: ${err.message}`);
      assert.equal(err.data.field, 'name');
      assert.match(err.message, /^invalid params: name: must match pattern/);
    }
    for (const path of ['snapshots', 'fork']) {
      const http = await requestJson<{ code: string; message: string }>(
        `${server.httpUrl}/v1/sessions/${s.sessionId}/${path}`,
        'POST',
        { name },
      );
      assert.equal(http.status, 400, `${path} ${name}: ${JSON.stringify(http.body)}`);
      assert.equal(http.body.code, 'EXEC_ERR_INVALID_PARAMS');
      assert.match(http.body.message, /body\/name must match pattern/);
    }
  }
  // A good name passes validation: what answers is the backend, which has no snapshots here.
  const ok = await s.request('session/snapshot', { name: 'v1.2' }).then(
    () => assert.fail('the local backend made a snapshot'),
    (e: { data: { code: string } }) => e,
  );
  assert.notEqual(ok.data.code, 'EXEC_ERR_INVALID_PARAMS');
});
