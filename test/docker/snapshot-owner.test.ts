/**
 * A snapshot is its tenant's only: another tenant cannot start a session from it, whether it
 * names it as `snapshot` or as `image` (the engine resolves an image id, and any unique prefix
 * of one, to the snapshot's image). Both answer 404 EXEC_ERR_NOT_FOUND and make no container;
 * the owner may name its own snapshot either way.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ExecServerHttpError, HttpApi } from '../../src/client/index.ts';
import { startServer } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';
import { docker } from './helpers.ts';

const FULL_ACCESS = { sandbox: { type: 'danger-full-access' as const }, approvalPolicy: 'never' as const };

async function refused(api: HttpApi, spec: Record<string, unknown>): Promise<ExecServerHttpError> {
  try {
    const made = await api.createSession(spec);
    await api.deleteSession(made.sessionId);
  } catch (err) {
    assert.ok(err instanceof ExecServerHttpError, String(err));
    return err;
  }
  throw new Error(`a session was made of ${JSON.stringify(spec)}`);
}

test("another tenant's snapshot named as the session's image is not found", dockerTestOptions, async (t) => {
  const server = await startServer({ backend: 'docker', flags: ['--tokens', 'alice:TA,bob:TB'] });
  t.after(() => server.close());
  const alice = new HttpApi(server.httpUrl, 'TA');
  const bob = new HttpApi(server.httpUrl, 'TB');

  const source = await bob.createSession(FULL_ACCESS);
  await bob.execCommand(source.sessionId, { cmd: 'echo bob-only > /workspace/secret.txt' });
  const snap = await bob.snapshot(source.sessionId, 'private');
  t.after(async () => {
    await docker('rmi', '-f', snap.snapshotId).catch(() => undefined);
  });
  await bob.deleteSession(source.sessionId);

  const hex = snap.snapshotId.replace(/^sha256:/, '');
  for (const spec of [{ snapshot: snap.snapshotId }, { image: snap.snapshotId }, { image: hex.slice(0, 12) }]) {
    const err = await refused(alice, { ...FULL_ACCESS, ...spec });
    assert.equal(err.status, 404, `${JSON.stringify(spec)}: ${err.message}`);
    assert.equal(err.code, 'EXEC_ERR_NOT_FOUND', `${JSON.stringify(spec)}: ${err.message}`);
  }
  assert.deepEqual(await alice.listSessions(), []);
  const users = await docker('ps', '-aq', '--filter', `ancestor=${snap.snapshotId}`);
  assert.equal(users.trim(), '', 'no container was made of the snapshot');

  // Its owner may name it as an image too.
  const own = await bob.createSession({ ...FULL_ACCESS, image: hex.slice(0, 12) });
  const read = await bob.execCommand(own.sessionId, { cmd: 'cat /workspace/secret.txt' });
  assert.match(read.output, /bob-only/);
  await bob.deleteSession(own.sessionId);
  await bob.deleteSnapshot(snap.snapshotId);
});
