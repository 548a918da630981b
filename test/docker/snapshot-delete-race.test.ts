/**
 * Deleting a snapshot while a session is being made from it, against a real engine. The delete
 * lists the containers that use the snapshot, then removes the image: a container made between
 * the two must still make it refuse (409 EXEC_ERR_SNAPSHOT_IN_USE), the snapshot left whole:
 * tagged, listed, usable. The window is made deterministic with a container list that answers
 * none (as if it ran before the create) while a container made from the snapshot exists.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type Docker from 'dockerode';
import type { DockerBackend } from '../../src/backends/docker/index.ts';
import { deleteSnapshot, SNAPSHOT_REPO, type SnapshotEngine } from '../../src/backends/docker/checkpoints/snapshots.ts';
import { ExecServerError } from '../../src/errors.ts';
import { asTenantId } from '../../src/ids.ts';
import { dockerTestOptions, engineReady } from './engine.ts';
import { docker, makeBackend, runScript, sessionSpec } from './helpers.ts';

let backend: DockerBackend;

before(() => {
  if (engineReady) backend = makeBackend();
});
after(async () => {
  if (engineReady) await backend.close();
});

/** The engine as a delete sees it whose first `early` container lists ran before the user was made. */
function listedTooEarly(real: Docker, early: number): SnapshotEngine {
  let calls = 0;
  return {
    getImage: (name) => real.getImage(name),
    listContainers: async (options?: Docker.ContainerListOptions) =>
      ++calls <= early ? [] : real.listContainers(options),
  };
}

async function inUse(run: Promise<unknown>): Promise<ExecServerError> {
  const err = await run.then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(
    err instanceof ExecServerError,
    err === undefined ? 'the delete succeeded' : `the delete failed otherwise: ${err}`,
  );
  assert.equal(err.code, 'EXEC_ERR_SNAPSHOT_IN_USE', err.message);
  return err;
}

async function tags(imageId: string): Promise<string[]> {
  const [info] = JSON.parse(await docker('image', 'inspect', imageId)) as Docker.ImageInspectInfo[];
  return info?.RepoTags ?? [];
}

test(
  'a container made after the list keeps the snapshot: 409, still tagged, listed, usable',
  dockerTestOptions,
  async (t) => {
    const alice = asTenantId('alice');
    const source = await backend.createSession(sessionSpec());
    await runScript(source, 'echo kept > /workspace/state.txt');
    const snap = await source.snapshot('race');
    await source.destroy();
    const made: string[] = [];
    t.after(async () => {
      for (const id of made) await docker('rm', '-f', id).catch(() => undefined);
      await docker('rmi', '-f', snap.snapshotId).catch(() => undefined);
    });
    const tagged = await tags(snap.snapshotId);
    assert.equal(tagged.length, 1, tagged.join(', '));
    assert.ok(tagged[0]?.startsWith(`${SNAPSHOT_REPO}:`), tagged.join(', '));

    // Made, not started: a session being created (or a hibernated one, stopped).
    const stopped = (
      await docker('create', '--label', 'exec-server-test=snapshot-delete-race', snap.snapshotId, 'true')
    ).trim();
    made.push(stopped);
    // Every list too early: the engine's refusal alone keeps the snapshot.
    const refused = await inUse(
      deleteSnapshot(listedTooEarly(backend.docker, Number.POSITIVE_INFINITY), snap.snapshotId, alice, 10_000),
    );
    assert.match(refused.message, new RegExp(`snapshot ${snap.snapshotId} is in use: .*${stopped.slice(0, 12)}`));
    assert.deepEqual(await tags(snap.snapshotId), tagged, 'the snapshot keeps its tag');
    assert.ok(
      (await backend.listSnapshots(alice)).some((s) => s.snapshotId === snap.snapshotId),
      'still listed',
    );

    // Usable: a session made from it sees its files.
    const fork = await backend.createSession(sessionSpec({ snapshot: snap.snapshotId }));
    made.push(fork.containerId ?? '');
    assert.equal((await runScript(fork, 'cat /workspace/state.txt')).text(), 'kept\n');
    await docker('rm', stopped);

    // A running one holds it too; the list after the engine's refusal names its session.
    const named = await inUse(deleteSnapshot(listedTooEarly(backend.docker, 1), snap.snapshotId, alice, 10_000));
    assert.match(named.message, new RegExp(`in use by session ${fork.id}: delete them first`));
    assert.deepEqual(await tags(snap.snapshotId), tagged, 'the snapshot keeps its tag');

    // Once nothing uses it, the delete takes all of it: no untagged image stays behind.
    await fork.destroy();
    await deleteSnapshot(listedTooEarly(backend.docker, 1), snap.snapshotId, alice, 10_000);
    await assert.rejects(docker('image', 'inspect', snap.snapshotId), /No such image/);
    assert.deepEqual(
      (await backend.listSnapshots(alice)).filter((s) => s.snapshotId === snap.snapshotId),
      [],
    );
  },
);

test('a snapshot given a second tag on the engine is refused whole, not untagged', dockerTestOptions, async (t) => {
  const alice = asTenantId('alice');
  const source = await backend.createSession(sessionSpec());
  const snap = await source.snapshot('tagged');
  await source.destroy();
  const extra = `exec-server-test-snapshot-delete-race:${snap.snapshotId.slice(7, 19)}`;
  t.after(async () => {
    await docker('rmi', extra).catch(() => undefined);
    await docker('rmi', '-f', snap.snapshotId).catch(() => undefined);
  });
  const own = await tags(snap.snapshotId);
  await docker('tag', snap.snapshotId, extra);

  const refused = await inUse(deleteSnapshot(backend.docker, snap.snapshotId, alice, 10_000));
  assert.match(refused.message, /has several tags on the engine/);
  assert.ok(refused.message.includes(extra), refused.message);
  assert.deepEqual((await tags(snap.snapshotId)).sort(), [...own, extra].sort(), 'no tag was removed');

  await docker('rmi', extra);
  await deleteSnapshot(backend.docker, snap.snapshotId, alice, 10_000);
  await assert.rejects(docker('image', 'inspect', snap.snapshotId), /No such image/);
});
