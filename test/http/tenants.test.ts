import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { test } from 'node:test';
import { RpcConnection, type RpcError } from '../../src/client/rpc-connection.ts';
import type { SessionInfo } from '../../src/protocol/index.ts';
import { newSession, serverWithApi } from './helpers.ts';

test("another tenant's session does not exist: 404 on every route, nothing runs, no WebSocket resume", async (t) => {
  const api = await serverWithApi(t, { flags: ['--tokens', 'alice:A,bob:B'] });
  const id = await newSession(api, {}, 'A');
  const workdir = (await api<SessionInfo>('GET', `/v1/sessions/${id}`, undefined, 'A')).body.workdir;
  const attempts: Array<[string, string, unknown]> = [
    ['GET', `/v1/sessions/${id}`, undefined],
    ['DELETE', `/v1/sessions/${id}`, undefined],
    ['POST', `/v1/sessions/${id}/snapshots`, {}],
    ['POST', `/v1/sessions/${id}/exec_command`, { cmd: 'touch bob-was-here' }],
    ['POST', `/v1/sessions/${id}/write_stdin`, { session_id: 1000, chars: 'x' }],
    [
      'POST',
      `/v1/sessions/${id}/tool-calls`,
      {
        type: 'function_call',
        call_id: 'c1',
        name: 'exec_command',
        arguments: JSON.stringify({ cmd: 'touch bob-was-here' }),
      },
    ],
    ['GET', `/v1/sessions/${id}/approvals`, undefined],
    ['POST', `/v1/sessions/${id}/approvals/appr_x`, { decision: 'approved' }],
  ];
  for (const [method, path, body] of attempts) {
    const r = await api(method, path, body, 'B');
    assert.equal(r.status, 404, `${method} ${path}`);
    assert.equal(r.body.code, 'EXEC_ERR_SESSION_NOT_FOUND');
    assert.equal(r.body.message, `session ${id} not found`, 'the same answer as for a session that never existed');
  }
  assert.deepEqual((await api<{ sessions: SessionInfo[] }>('GET', '/v1/sessions', undefined, 'B')).body.sessions, []);
  assert.equal((await api<{ sessions: SessionInfo[] }>('GET', '/v1/sessions', undefined, 'A')).body.sessions.length, 1);
  assert.ok(!existsSync(`${workdir}/bob-was-here`));
  assert.deepEqual(readdirSync(workdir), []);

  // WebSocket: bob cannot resume alice's session; alice can.
  const bob = await RpcConnection.open(api.server.url, { token: 'B' });
  t.after(() => bob.close());
  await assert.rejects(
    bob.request('initialize', { clientName: 't', resumeSessionId: id }),
    (err: RpcError) => err.code === 'EXEC_ERR_SESSION_NOT_FOUND',
  );
  await assert.rejects(
    bob.request('process/start', { processId: 'p', argv: ['touch', `${workdir}/ws`] }),
    (err: RpcError) => err.code === 'EXEC_ERR_NOT_INITIALIZED',
  );
  const alice = await RpcConnection.open(api.server.url, { token: 'A' });
  t.after(() => alice.close());
  const init = await alice.request('initialize', { clientName: 't', resumeSessionId: id });
  assert.equal(init['sessionId'], id);
  // The session still exists for its owner after all of bob's attempts.
  assert.equal((await api('GET', `/v1/sessions/${id}`, undefined, 'A')).status, 200);
  // Unknown tokens get 401 on the upgrade.
  await assert.rejects(
    RpcConnection.open(api.server.url, { token: 'C' }),
    (err: Error & { statusCode?: number }) => err.statusCode === 401,
  );
});
