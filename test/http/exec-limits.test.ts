/**
 * A start past the kernel's bound on one argument or environment string answers the spawn
 * failure (E2BIG, 422), on every route, before any backend (src/processes/exec-limits.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RpcConnection, type RpcError } from '../../src/client/rpc-connection.ts';
import { MAX_ARG_BYTES } from '../../src/processes/exec-limits.ts';
import { newSession, serverWithApi } from './helpers.ts';

test('one argument or environment string past 128 KiB is a clear spawn failure, not a 500', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api, {});
  const long = 'x'.repeat(MAX_ARG_BYTES);
  const tool = await api('POST', `/v1/sessions/${id}/exec_command`, { cmd: `true # ${long}` });
  assert.equal(tool.status, 422, JSON.stringify(tool.body).slice(0, 300));
  assert.equal(tool.body.code, 'EXEC_ERR_SPAWN_FAILED');
  assert.match(String(tool.body.message), /Argument list too long \(argv\[2\] is \d+ bytes; .*stdin or a file\)/);

  const conn = await RpcConnection.open(api.server.url, {});
  t.after(() => conn.close());
  await conn.request('initialize', { clientName: 't', resumeSessionId: id });
  conn.notify('initialized', {});
  const spawnFailed = (err: RpcError) => err.code === 'EXEC_ERR_SPAWN_FAILED' && /E2BIG|too long/.test(err.message);
  await assert.rejects(conn.request('process/start', { processId: 'a', argv: ['echo', long] }), spawnFailed);
  await assert.rejects(
    conn.request('process/start', { processId: 'e', argv: ['true'], env: { BIG: long } }),
    spawnFailed,
  );
  await assert.rejects(conn.request('process/start', { processId: 't', argv: ['echo', long], tty: true }), spawnFailed);
  // Just under the bound runs.
  const fits = 'y'.repeat(MAX_ARG_BYTES - 1 - 1);
  await conn.request('process/start', { processId: 'ok', argv: ['sh', '-c', `: ${fits.slice(2)}`] });
  const r = await conn.request<{ exited: boolean; exitCode: number | null }>('process/read', {
    processId: 'ok',
    waitMs: 5000,
  });
  assert.equal(r.exitCode, 0);
});
