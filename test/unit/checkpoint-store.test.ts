/**
 * The store of memory checkpoints (src/backends/docker/checkpoints/checkpoint-store.ts) on a
 * real filesystem laid out as the engine's data directory: a checkpoint moves from the source
 * container's directory into the store, is installed into each new container's directory under
 * a fresh name with its own marker (hard links for the rest), is counted, and goes with remove;
 * a second store on the same directory (another replica of a fleet) sees it come and go.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type Docker from 'dockerode';
import { CheckpointStore } from '../../src/backends/docker/checkpoints/checkpoint-store.ts';

const SNAPSHOT = `sha256:${'ab'.repeat(32)}`;

test('a checkpoint is kept, installed per container with its own marker, counted and removed', async (t) => {
  const root = await mkdtemp(join(tmpdir(), 'exec-server-engine-root-'));
  t.after(() => rm(root, { recursive: true, force: true }));
  const engine = { info: async () => ({ DockerRootDir: root }) } as unknown as Docker;
  const source = join(root, 'containers', 'src', 'checkpoints', 'cp1');
  await mkdir(source, { recursive: true });
  await writeFile(join(source, 'checkpoint.img'), Buffer.alloc(4096, 7));
  await writeFile(join(source, 'exec-server-checkpoint'), 'source marker\n');
  await symlink('/etc/passwd', join(source, 'link'));
  for (const c of ['fork1', 'fork2']) await mkdir(join(root, 'containers', c), { recursive: true });

  const store = new CheckpointStore(join(root, 'store'), engine, 1000);
  await store.check();
  // Another replica of a fleet on the same directory, loaded before the checkpoint was kept.
  const peer = new CheckpointStore(join(root, 'store'), engine, 1000);
  assert.equal(await peer.has(SNAPSHOT), false);
  assert.equal(await store.has(SNAPSHOT), false);
  const meta = { network: true, marks: { 3: [[7, 100] as const] } };
  const bytes = await store.keep('src', 'cp1', SNAPSHOT, meta);
  assert.ok(bytes >= 4096);
  assert.equal(await store.has(SNAPSHOT), true);
  assert.equal(await peer.has(SNAPSHOT), true, 'a checkpoint another process kept is seen');
  assert.deepEqual(peer.totals, { count: 1, bytes });
  assert.deepEqual(store.totals, { count: 1, bytes });
  assert.equal((await stat(join(root, 'store'))).mode & 0o777, 0o700, 'the store is root-only');
  const kept = join(root, 'store', 'ab'.repeat(32));
  assert.deepEqual(
    (await readdir(kept)).sort(),
    ['checkpoint.img', 'exec-server-checkpoint', 'exec-server-meta.json'],
    'links are not taken; what is known of the source is kept beside',
  );
  assert.deepEqual(await store.meta(SNAPSHOT), meta);
  assert.deepEqual(await store.meta(`sha256:${'cd'.repeat(32)}`), {}, 'none kept: nothing known');

  const names = [await store.install(SNAPSHOT, 'fork1'), await store.install(SNAPSHOT, 'fork2')];
  assert.match(names[0]!, /^exec-server-hibernation-/, 'a name of ours: deleted after the restore');
  const markers = await Promise.all(
    ['fork1', 'fork2'].map((c, i) =>
      readFile(join(root, 'containers', c, 'checkpoints', names[i]!, 'exec-server-checkpoint'), 'utf8'),
    ),
  );
  assert.notEqual(markers[0], markers[1], 'no two copies alike (containerd uploads)');
  assert.notEqual(markers[0], 'source marker\n');
  const img = await stat(join(root, 'containers', 'fork1', 'checkpoints', names[0]!, 'checkpoint.img'));
  assert.equal(img.size, 4096);
  assert.ok(img.nlink >= 2, 'the image is hard-linked, not copied');
  assert.deepEqual(
    (await readdir(join(root, 'containers', 'fork1', 'checkpoints', names[0]!))).sort(),
    ['checkpoint.img', 'exec-server-checkpoint'],
    'the meta file stays in the store',
  );

  // A new store on the same directory finds what is kept (a restarted server).
  assert.deepEqual(new CheckpointStore(join(root, 'store'), engine, 1000).totals.count, 0);
  const again = new CheckpointStore(join(root, 'store'), engine, 1000);
  assert.equal(await again.has(SNAPSHOT), true);
  assert.deepEqual(again.totals, { count: 1, bytes });

  await store.remove(SNAPSHOT);
  assert.equal(await store.has(SNAPSHOT), false);
  assert.deepEqual(store.totals, { count: 0, bytes: 0 });
  assert.deepEqual(await readdir(join(root, 'store')), []);
  assert.equal(await peer.has(SNAPSHOT), false, 'and gone once another process removed it');
  assert.deepEqual(peer.totals, { count: 0, bytes: 0 });
});

test("without the engine's data directory, memory checkpoints are a clear error", async () => {
  const engine = { info: async () => ({ DockerRootDir: '/nonexistent/docker' }) } as unknown as Docker;
  const store = new CheckpointStore(join(tmpdir(), 'unused'), engine, 1000);
  await assert.rejects(store.check(), (err: Error & { code?: string }) => {
    assert.equal(err.code, 'EXEC_ERR_UNSUPPORTED');
    assert.match(err.message, /engine's data directory \(\/nonexistent\/docker\) on this server's host/);
    return true;
  });
});
