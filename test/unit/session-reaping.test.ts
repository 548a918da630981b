/** Session lifetime: idle reaping, maximum lifetime, quotas; on the local backend. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { RpcError } from '../../src/client/rpc-connection.ts';
import { asTenantId } from '../../src/ids.ts';
import { startServer, TestSession } from '../support/harness.ts';

test('idle sessions (no client, nothing running) and sessions past their lifetime are reaped', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const sessions = server.app.sessions;
  const tenant = asTenantId('default');
  const idle = await sessions.create({ idleTimeoutSeconds: 1 }, { tenant });
  const busy = await sessions.create({ idleTimeoutSeconds: 1 }, { tenant });
  await busy.processes.start({ processId: 'keep' as never, argv: ['sleep', '30'], mode: 'pipe-no-stdin' });
  const old = await sessions.create({ maxLifetimeSeconds: 1 }, { tenant });
  await sessions.reap(Date.now() + 1500);
  const alive = sessions.list(tenant).map((s) => s.id);
  assert.ok(!alive.includes(idle.id), 'idle session reaped');
  assert.ok(alive.includes(busy.id), 'a session with a running process is not idle');
  assert.ok(!alive.includes(old.id), 'expired session reaped');
  await busy.processes.terminateAll();
});

test('a session attached to a client is not idle; per-tenant quota answers a clear limit error', async (t) => {
  const server = await startServer({ flags: ['--max-sessions-per-tenant', '2'] });
  t.after(() => server.close());
  const a = await TestSession.open(server.url, { session: { idleTimeoutSeconds: 1 } });
  t.after(() => a.close());
  await server.app.sessions.reap(Date.now() + 5000);
  assert.equal((await a.request<Record<string, unknown>>('session/info', {}))['status'], 'alive');
  const b = await TestSession.open(server.url);
  t.after(() => b.close());
  await assert.rejects(
    TestSession.open(server.url),
    (e: RpcError) => e.code === 'EXEC_ERR_SESSION_LIMIT' && /quota/.test(e.message),
  );
});
