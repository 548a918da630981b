/**
 * Batch create (`POST /v1/sessions?count=N`, src/sessions/batch-create.ts): N sessions answered
 * together, limits checked for the whole batch first, and a failed batch leaves nothing behind.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HttpApi } from '../../src/client/index.ts';
import type { SessionInfo } from '../../src/protocol/index.ts';
import { createBatch } from '../../src/sessions/batch-create.ts';
import { ExecServerError } from '../../src/errors.ts';
import { serverWithApi } from './helpers.ts';

test('count=4 makes four sessions of the spec; one past the limit makes none', async (t) => {
  const api = await serverWithApi(t, { flags: ['--max-sessions', '6'] });
  const made = await api<{ sessions: SessionInfo[] }>('POST', '/v1/sessions?count=4', { labels: { run: 'b' } });
  assert.equal(made.status, 201);
  assert.equal(made.body.sessions.length, 4);
  assert.equal(new Set(made.body.sessions.map((s) => s.sessionId)).size, 4);
  assert.ok(made.body.sessions.every((s) => s.labels?.['run'] === 'b' && s.status === 'alive'));

  // Two left under --max-sessions 6: a batch of 3 is refused whole, before anything is made.
  const refused = await api('POST', '/v1/sessions?count=3', {});
  assert.equal(refused.status, 429);
  assert.equal(refused.body.code, 'EXEC_ERR_SESSION_LIMIT');
  assert.match(refused.body.message ?? '', /room for 2/);
  const listed = await api<{ sessions: SessionInfo[] }>('GET', '/v1/sessions');
  assert.equal(listed.body.sessions.length, 4);

  for (const bad of ['0', '257', 'x']) {
    const r = await api('POST', `/v1/sessions?count=${bad}`, {});
    assert.equal(r.status, 400, bad);
  }
  // The SDK's batch, and a plain create still answers one session.
  const http = new HttpApi(api.server.httpUrl);
  const two = await http.createSessions(2);
  assert.equal(two.length, 2);
  const one = await api<SessionInfo>('POST', '/v1/sessions', {});
  assert.equal(one.status, 429, 'the server is full now');
  await http.deleteSession(two[0]!.sessionId);
  const single = await api<SessionInfo>('POST', '/v1/sessions', {});
  assert.equal(single.status, 201);
  assert.equal(typeof single.body.sessionId, 'string');
});

test('a batch with one failed create removes the sessions it made and says so', async () => {
  const removed: number[] = [];
  let n = 0;
  await assert.rejects(
    createBatch(5, 10, {
      create: async () => {
        const i = n++;
        await new Promise((r) => setTimeout(r, i));
        if (i === 3) throw new ExecServerError('EXEC_ERR_BACKEND', 'engine refused');
        return i;
      },
      destroy: async (i) => {
        removed.push(i);
      },
    }),
    (err: ExecServerError) => {
      assert.equal(err.code, 'EXEC_ERR_BACKEND');
      assert.match(err.message, /1 of 5 sessions could not be made \(the 4 made were removed\): engine refused/);
      assert.deepEqual(err.detail?.['batch'], { count: 5, failed: 1, removed: 4 });
      return true;
    },
  );
  assert.deepEqual(removed.sort(), [0, 1, 2, 4]);
});
