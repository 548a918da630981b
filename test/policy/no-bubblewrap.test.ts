/** Without bubblewrap the local backend says so and runs with sandbox type none: never a denial. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startServer, TestSession } from '../support/harness.ts';

test('bwrap unavailable: session/info reports none and why; failures are never classified as denials', async (t) => {
  const server = await startServer({ noBubblewrap: true });
  t.after(() => server.close());
  const s = await TestSession.open(server.url, { session: { approvalPolicy: 'on-failure' } });
  t.after(() => s.close());
  const info = await s.request<Record<string, unknown>>('session/info', {});
  assert.equal(info['sandboxType'], 'none');
  assert.match(String(info['sandboxUnavailableReason']), /disabled by the test/);
  const start = await s.start('p', ['sh', '-c', 'echo "Permission denied" >&2; exit 1']);
  assert.equal(start['sandboxType'], 'none');
  const r = await s.result('p');
  assert.equal(r.exited['sandboxDenied'], false);
  assert.ok(!r.events.some((e) => e.method === 'process/escalated'));
});

test('a sandboxed process sees TMPDIR in a writable root, not the one it was given', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const s = await TestSession.open(server.url, {
    session: { sandbox: { type: 'workspace-write', excludeSlashTmp: true } },
  });
  t.after(() => s.close());
  const info = await s.request<Record<string, unknown>>('session/info', {});
  const r = await s.run('tmp', ['sh', '-c', 'echo "$TMPDIR"; touch "$TMPDIR/probe" && echo writable'], {
    env: { TMPDIR: '/var/tmp/not-mine' },
  });
  assert.equal(r.stdout, `${String(info['workdir'])}\nwritable\n`);
});
