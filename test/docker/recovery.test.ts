/**
 * Crash recovery: a server restarted with the same instance id re-adopts its running session
 * containers with their own policy (from the stored record); a container without a record is
 * removed rather than re-adopted under defaults. The "crash" is a second server on the same
 * engine while the first one is abandoned without shutdown.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { RECORD_FILE } from '../../src/backends/docker/exec/scripts.ts';
import { abandon, sleep, startServer, TestSession } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';

test('re-adoption keeps the session policy; a session without its record is removed', dockerTestOptions, async (t) => {
  const instanceId = `recovery-${process.pid}-${Date.now()}`;
  const first = await startServer({ backend: 'docker', instanceId });
  const kept = await TestSession.open(first.url, {
    session: { sandbox: { type: 'read-only' }, denyRead: ['/workspace/secret'], approvalPolicy: 'never' },
  });
  const keptInfo = await kept.request<Record<string, unknown>>('session/info', {});
  const doomed = await TestSession.open(first.url);
  const doomedInfo = await doomed.request<Record<string, unknown>>('session/info', {});
  // The secret is put there from outside (the session itself is read-only).
  execFileSync('docker', ['exec', String(keptInfo['containerId']), 'sh', '-c', 'echo classified > /workspace/secret']);
  // The records are stored in the background (an engine exec each, slow under load): wait until
  // both are there, or the doomed one's could land after its removal below (written through a
  // temporary file, so one that exists is whole).
  const stored = (info: Record<string, unknown>): boolean => {
    try {
      const id = String(info['containerId']);
      const argv = ['exec', '-u', '0', id, 'sh', '-c', 'test -s "$1"', 'sh', RECORD_FILE];
      execFileSync('docker', argv, { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  };
  const deadline = Date.now() + 30_000;
  while (!(stored(keptInfo) && stored(doomedInfo)) && Date.now() < deadline) await sleep(200);
  assert.ok(stored(keptInfo) && stored(doomedInfo), 'both session records were stored');
  execFileSync('docker', ['exec', String(doomedInfo['containerId']), 'rm', '-f', RECORD_FILE]);
  await kept.close();
  await doomed.close();

  // The first server "crashes": abandoned without shutdown; its containers keep running.
  await abandon(first);
  const second = await startServer({ backend: 'docker', instanceId });
  t.after(() => second.close());
  const again = await TestSession.open(second.url, { resumeSessionId: String(keptInfo['sessionId']) });
  t.after(() => again.close());
  const info = await again.request<Record<string, unknown>>('session/info', {});
  assert.deepEqual(info['sandbox'], { type: 'read-only' });
  assert.equal(info['approvalPolicy'], 'never');
  const write = await again.run('w', ['sh', '-c', 'echo x > /workspace/new-file']);
  assert.notEqual(write.exited['exitCode'], 0, 'read-only still holds after re-adoption');
  const read = await again.run('r', ['cat', '/workspace/secret']);
  assert.notEqual(read.exited['exitCode'], 0, 'deny-read still holds after re-adoption');
  assert.match(read.stderr, /Permission denied/);
  assert.ok(!read.stdout.includes('classified'));
  const exists = execFileSync('docker', [
    'exec',
    String(keptInfo['containerId']),
    'cat',
    '/workspace/secret',
  ]).toString();
  assert.equal(exists, 'classified\n', 'the secret is there; only the sandbox keeps it out');
  await assert.rejects(TestSession.open(second.url, { resumeSessionId: String(doomedInfo['sessionId']) }), /not found/);
  const gone = execFileSync('docker', ['ps', '-aq', '--filter', `id=${String(doomedInfo['containerId'])}`])
    .toString()
    .trim();
  assert.equal(gone, '', 'the container without a record was removed');
  // Let the abandoned first server go without touching the re-adopted containers.
  await first.app.close().catch(() => undefined);
});
