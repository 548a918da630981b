/**
 * Hibernation in the audit log (gVisor, runsc): a hibernate and a wake asked over the WebSocket
 * are one `session.hibernate` and one `session.wake` line each, under the caller's principal,
 * and the chain is intact.
 */
import './use-runsc.ts';
import assert from 'node:assert/strict';
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { verifyText } from '../../src/audit/verify.ts';
import { dockerTestOptions } from '../docker/engine.ts';
import { startServer, TestSession } from '../support/harness.ts';

test('hibernate and wake are audited once each', { ...dockerTestOptions, timeout: 240_000 }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'guard-hibernate-'));
  const path = join(dir, 'audit.jsonl');
  const server = await startServer({
    backend: 'docker',
    flags: ['--allowed-runtimes', 'runsc', '--tokens', 'acme:hibernate-tenant-secret', '--audit-log', path],
  });
  t.after(() => server.close());
  const s = await TestSession.open(
    server.url,
    { session: { runtime: 'runsc', sandbox: { type: 'danger-full-access' }, approvalPolicy: 'never' } },
    { token: 'hibernate-tenant-secret' },
  );
  t.after(() => s.close());
  assert.equal((await s.request('session/hibernate', {}))['hibernation'], 'hibernated');
  assert.equal((await s.request('session/wake', {}))['hibernation'], 'awake');
  await s.close();
  await server.close();
  const text = await readFile(path, 'utf8');
  const lines = text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { action: string; session: string; principal: string });
  for (const action of ['session.hibernate', 'session.wake']) {
    const found = lines.filter((l) => l.action === action);
    assert.equal(found.length, 1, `${action}: ${JSON.stringify(found)}`);
    assert.equal(found[0]?.session, s.sessionId);
    assert.equal(found[0]?.principal, 'tenant:acme');
  }
  assert.equal(verifyText(text).ok, true);
  assert.ok(!text.includes('hibernate-tenant-secret'));
});
