/**
 * `--allowed-sandbox-types` on a real server, on each backend: a sandbox type a tenant may not
 * ask for is refused with 403 `EXEC_ERR_SANDBOX_TYPE_FORBIDDEN` naming the allowed types
 * (JSON-RPC `initialize`, `POST /v1/sessions`, MCP `create_session`), before any session
 * exists; so is a command that would run outside the sandbox (escalation), and a denied command
 * is reported instead of retried outside it; an allowed type works, per tenant as configured.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { SessionInfo } from '../../src/protocol/index.ts';
import { loadConfig } from '../../src/config.ts';
import { RpcError } from '../../src/client/rpc-connection.ts';
import { dockerTestOptions } from '../docker/engine.ts';
import { BACKENDS } from '../support/backends.ts';
import type { BackendKind } from '../support/harness.ts';
import { call, mcpClient } from '../mcp/helpers.ts';
import { requestJson } from './helpers.ts';

const { startServer, TestSession } = await import('../support/harness.ts');

const ALICE = 'alice-sandbox-token';
const BOB = 'bob-sandbox-token';
const CODE = 'EXEC_ERR_SANDBOX_TYPE_FORBIDDEN';

const forbidden = (e: unknown): boolean =>
  e instanceof RpcError && e.code === CODE && /allowed sandbox types: workspace-write, read-only/.test(e.message);

for (const backend of BACKENDS) {
  const options = backend === 'docker' ? dockerTestOptions : { timeout: 90_000 };
  test(
    `allowed sandbox types (${backend}): refused with its code, allowed ones work, per tenant`,
    options,
    async (t) => {
      const server = await startServer({
        backend: backend as BackendKind,
        flags: [
          '--tokens',
          `alice:${ALICE},bob:${BOB}`,
          '--allowed-sandbox-types',
          'workspace-write,read-only,bob:danger-full-access',
        ],
      });
      t.after(() => server.close());
      const full = { sandbox: { type: 'danger-full-access' } };

      // Alice may not have danger-full-access, on any route.
      await assert.rejects(TestSession.open(server.url, { session: full }, { token: ALICE }), forbidden);
      const rest = await requestJson(`${server.httpUrl}/v1/sessions`, 'POST', full, ALICE);
      assert.equal(rest.status, 403);
      assert.equal(rest.body.code, CODE);
      assert.match(String(rest.body.message), /danger-full-access is not allowed.*workspace-write, read-only/);
      const { client } = await mcpClient(t, server.httpUrl, { token: ALICE });
      const viaMcp = await call(client, 'create_session', full);
      assert.equal(viaMcp.isError, true);
      assert.equal(viaMcp.structuredContent?.['code'], CODE);
      assert.equal(server.app.sessions.size, 0, 'nothing was created');

      // What she may have works.
      const alice = await TestSession.open(
        server.url,
        { session: { sandbox: { type: 'workspace-write' }, approvalPolicy: 'on-request' } },
        { token: ALICE },
      );
      t.after(() => alice.close());
      const ok = await alice.run('ok', ['sh', '-c', 'echo sandboxed']);
      assert.equal(ok.stdout, 'sandboxed\n');
      const ro = await requestJson<SessionInfo>(
        `${server.httpUrl}/v1/sessions`,
        'POST',
        { sandbox: { type: 'read-only' } },
        ALICE,
      );
      assert.equal(ro.status, 201);
      // Nor can she run a command outside the sandbox by escalating, approved or not.
      await assert.rejects(
        alice.start('esc', ['id', '-u'], { sandboxPermissions: 'require-escalated', approval: 'approved' }),
        (e: unknown) => e instanceof RpcError && e.code === CODE && /outside the sandbox/.test(e.message),
      );
      await assert.rejects(alice.request('process/read', { processId: 'esc' }), /unknown process id/);

      // A command the sandbox denies is reported, not retried outside it, even where the policy would.
      const retrying = await TestSession.open(
        server.url,
        { session: { approvalPolicy: 'on-failure' } },
        { token: ALICE, onServerRequest: () => ({ decision: 'approved' }) },
      );
      t.after(() => retrying.close());
      const outside = backend === 'docker' ? '/' : '/var/tmp';
      const target = `${outside.replace(/\/$/, '')}/exec-server-forbidden-${Date.now()}`;
      const denied = await retrying.run('denied', ['sh', '-c', `echo x > ${target} && rm -f ${target}`]);
      assert.notEqual(denied.exited['exitCode'], 0);
      assert.equal(denied.exited['sandboxDenied'], true);
      assert.equal(
        denied.events.some((e) => e.method === 'process/escalated'),
        false,
        'no retry outside the sandbox',
      );

      // Bob may.
      const bob = await TestSession.open(server.url, { session: full }, { token: BOB });
      t.after(() => bob.close());
      const id = await bob.run('id', ['id', '-u']);
      assert.equal(id.exited['exitCode'], 0);
    },
  );
}

test('allowed sandbox types: parsed at boot, bad entries and a forbidden default refused', () => {
  const load = (v: string, extra: string[] = []) => loadConfig(['--allowed-sandbox-types', v, ...extra], {});
  assert.equal(
    load('workspace-write,alice:danger-full-access').allowedSandboxTypes,
    'workspace-write,alice:danger-full-access',
  );
  assert.equal(
    loadConfig([], { EXEC_SERVER_ALLOWED_SANDBOX_TYPES: 'read-only', EXEC_SERVER_SANDBOX: 'read-only' })
      .allowedSandboxTypes,
    'read-only',
  );
  for (const bad of ['full', 'workspace-write,al ice:read-only', 'workspace-write,:read-only'])
    assert.throws(() => load(bad), /--allowed-sandbox-types/, bad);
  // The default type of new sessions must be allowed to everyone it applies to.
  assert.throws(() => load('read-only'), /--sandbox workspace-write .* not among --allowed-sandbox-types/);
  assert.equal(load('read-only', ['--sandbox', 'read-only']).sandbox, 'read-only');
  // Only per-tenant entries: tenants without one may ask for nothing (no boot error).
  assert.equal(load('alice:read-only').allowedSandboxTypes, 'alice:read-only');
});
