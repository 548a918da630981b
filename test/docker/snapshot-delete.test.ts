/**
 * `DELETE /v1/snapshots/:id` answers what happened, against a real engine (it answered 502 for
 * an engine refusal): 409 EXEC_ERR_SNAPSHOT_IN_USE while a session runs from the snapshot or
 * while it is the base of another snapshot, naming what holds it; 204 once nothing does; 404
 * EXEC_ERR_NOT_FOUND when it is gone.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ExecServerHttpError, HttpApi } from '../../src/client/index.ts';
import { startServer } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';
import { docker } from './helpers.ts';

async function deleteFails(api: HttpApi, id: string): Promise<ExecServerHttpError> {
  try {
    await api.deleteSnapshot(id);
  } catch (err) {
    assert.ok(err instanceof ExecServerHttpError, String(err));
    return err;
  }
  throw new Error(`deleting ${id} succeeded`);
}

test('deleting a snapshot: 409 while used, 204 once free, 404 when gone', dockerTestOptions, async (t) => {
  const server = await startServer({ backend: 'docker' });
  t.after(() => server.close());
  const api = new HttpApi(server.httpUrl);
  const images: string[] = [];
  t.after(async () => {
    for (const id of images) await docker('rmi', '-f', id).catch(() => undefined);
  });

  const origin = await api.createSession();
  const base = await api.snapshot(origin.sessionId, 'base');
  images.push(base.snapshotId);
  await api.deleteSession(origin.sessionId);

  const fork = await api.createSession({ snapshot: base.snapshotId });
  const running = await deleteFails(api, base.snapshotId);
  assert.equal(running.status, 409);
  assert.equal(running.code, 'EXEC_ERR_SNAPSHOT_IN_USE');
  assert.match(running.message, new RegExp(`in use by session ${fork.sessionId}`));

  // A snapshot of the fork has the first for its parent image.
  const child = await api.snapshot(fork.sessionId, 'child');
  images.unshift(child.snapshotId);
  await api.deleteSession(fork.sessionId);
  const parent = await deleteFails(api, base.snapshotId);
  assert.equal(parent.status, 409);
  assert.equal(parent.code, 'EXEC_ERR_SNAPSHOT_IN_USE');
  assert.match(parent.message, /base of other snapshots/);

  await api.deleteSnapshot(child.snapshotId);
  await api.deleteSnapshot(base.snapshotId);
  const gone = await deleteFails(api, base.snapshotId);
  assert.equal(gone.status, 404);
  assert.equal(gone.code, 'EXEC_ERR_NOT_FOUND');
  assert.deepEqual(
    (await api.listSnapshots()).filter((s) => s.snapshotId === base.snapshotId || s.snapshotId === child.snapshotId),
    [],
  );
});
