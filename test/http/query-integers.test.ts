/**
 * An integer in a query is taken as written (src/transport/validator.ts): the validation converts
 * a query before it checks it, and read "1.5" as 1 and "0x2" as 2, so a batch got another size
 * than asked and a download started at another offset. Both are refused now, naming the field.
 */
import assert from 'node:assert/strict';
import { mkdtemp, realpath, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { SessionInfo } from '../../src/protocol/index.ts';
import { serverWithApi } from './helpers.ts';

const NOT_WHOLE = ['1.5', '2.9', 'true', '0x2', '%201', '1e0', '-1', ''];

test('a batch count that is not a whole number is refused, and nothing is made', async (t) => {
  const api = await serverWithApi(t);
  for (const count of NOT_WHOLE) {
    const r = await api('POST', `/v1/sessions?count=${count}`, {});
    assert.equal(r.status, 400, `count=${count}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.code, 'EXEC_ERR_INVALID_PARAMS', `count=${count}`);
    assert.match(r.body.message ?? '', /querystring\/count must be a whole number/, `count=${count}`);
  }
  const listed = await api<{ sessions: SessionInfo[] }>('GET', '/v1/sessions');
  assert.deepEqual(listed.body.sessions, []);
  const two = await api<{ sessions: SessionInfo[] }>('POST', '/v1/sessions?count=02', {});
  assert.equal(two.status, 201, JSON.stringify(two.body));
  assert.equal(two.body.sessions.length, 2);
});

test('a download offset that is not a whole number is refused; a whole one is served', async (t) => {
  const workdir = await realpath(await mkdtemp(join(tmpdir(), 'query-int-')));
  t.after(() => rm(workdir, { recursive: true, force: true }));
  await writeFile(join(workdir, 'f.txt'), 'abcdef');
  const api = await serverWithApi(t);
  const made = await api<SessionInfo>('POST', '/v1/sessions', { workdir });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const url = (offset: string): string =>
    `/v1/sessions/${made.body.sessionId}/files/content?path=${encodeURIComponent(join(workdir, 'f.txt'))}&offset=${offset}`;
  for (const offset of NOT_WHOLE) {
    const r = await api('GET', url(offset));
    assert.equal(r.status, 400, `offset=${offset}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.code, 'EXEC_ERR_INVALID_PARAMS', `offset=${offset}`);
  }
  const r = await api('GET', url('2'));
  assert.equal(r.status, 200);
  assert.equal(r.body, 'cdef');
});
