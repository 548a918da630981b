/**
 * A memory snapshot that fails after its image was committed removes its checkpoint and its
 * image (checkpoints/memory-snapshot.ts). When one of those removals fails, the client still
 * gets the snapshot's own error, and the leftover is not silent: a warning names the session,
 * the snapshot and what was left, `exec_server_snapshot_cleanup_failures_total{leftover}`
 * counts it, and the other removal is still made. No sweep removes such leftovers later.
 *
 * Real engine and runsc: the session is checkpointed, committed, its checkpoint moved into a
 * real store and the session restored. Two failures are injected at the interface the module
 * takes (`MemorySnapshots`), as nothing makes them happen on demand: the store refuses to keep
 * the checkpoint after moving it in (as a disk that fills up would), and then one removal
 * rejects once: the image's (`removeImage`) or the checkpoint's (`store.remove`).
 */
import './use-runsc.ts';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import Docker from 'dockerode';
import { checkpointContainer, clearAfterRestore } from '../../src/backends/docker/checkpoints/checkpoint-restore.ts';
import { CheckpointStore } from '../../src/backends/docker/checkpoints/checkpoint-store.ts';
import { type CheckpointApi, CHECKPOINT_PREFIX } from '../../src/backends/docker/checkpoints/checkpoints.ts';
import { deleteSnapshot } from '../../src/backends/docker/checkpoints/snapshots.ts';
import {
  type CheckpointableSession,
  type MemorySnapshots,
  takeMemorySnapshot,
} from '../../src/backends/docker/checkpoints/memory-snapshot.ts';
import type { DockerBackend } from '../../src/backends/docker/index.ts';
import type { BackendSession } from '../../src/backends/types.ts';
import { execError } from '../../src/errors.ts';
import { Metrics } from '../../src/metrics.ts';
import { dockerTestOptions, TEST_IMAGE } from '../docker/engine.ts';
import { docker, makeBackend, runScript, sessionSpec } from '../docker/helpers.ts';

const engine = new Docker(process.env.DOCKER_HOST ? undefined : { socketPath: '/var/run/docker.sock' });

/** The error the store answers `keep` with, after the checkpoint was moved in (injected). */
const keepFailure = () => execError('EXEC_ERR_BACKEND', 'injected: no space left on the checkpoint store');

/** A real store whose `keep` fails after moving the checkpoint in, and whose `remove` may reject once. */
class FailingStore extends CheckpointStore {
  removeFailures = 0;
  readonly thrown: Error[] = [];
  override async keep(...args: Parameters<CheckpointStore['keep']>): Promise<number> {
    await super.keep(...args);
    const err = keepFailure();
    this.thrown.push(err);
    throw err;
  }
  override async remove(snapshotId: string): Promise<void> {
    if (this.removeFailures-- > 0) throw new Error('injected: checkpoint directory busy');
    await super.remove(snapshotId);
  }
}

interface Warning {
  readonly fields: Record<string, unknown>;
  readonly message: string | undefined;
}

/** A gVisor session on a backend of its own, a real store in a directory of the test's, and what the module is given. */
async function setUp(t: TestContext) {
  const dir = await mkdtemp(join(tmpdir(), 'exec-server-snapshot-cleanup-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const backend: DockerBackend = makeBackend({ warmPoolSize: 0, checkpointDir: dir });
  t.after(() => backend.close());
  const session: BackendSession = await backend.createSession(sessionSpec());
  t.after(() => session.destroy().catch(() => undefined));
  // Whatever image a snapshot of the session left, whether the test saw it or not.
  t.after(async () => {
    const left = await docker('images', '-q', '--filter', `label=exec-server.snapshot-session=${session.id}`);
    for (const id of new Set(left.split('\n').filter(Boolean))) await docker('rmi', '-f', id).catch(() => undefined);
  });
  const store = new FailingStore(dir, engine, 30_000);
  const warnings: Warning[] = [];
  let imageFailures = 0;
  const m: MemorySnapshots = {
    store,
    maxBytes: 512 * 1024 * 1024,
    // The image alone (the backend's deletion would remove the checkpoint too, from its own store).
    removeImage: async (snapshotId) => {
      if (imageFailures-- > 0) throw execError('EXEC_ERR_BACKEND', 'injected: image remove failed');
      await deleteSnapshot(engine, snapshotId, undefined, 30_000);
    },
    log: {
      info: () => undefined,
      debug: () => undefined,
      error: () => undefined,
      warn: (fields, message) => warnings.push({ fields: fields as Record<string, unknown>, message }),
    },
  };
  const metrics = new Metrics();
  metrics.watchCheckpoints(() => store.totals);
  return {
    dir,
    session,
    store,
    m,
    warnings,
    metrics,
    failImageOnce: () => {
      imageFailures = 1;
    },
  };
}

/** The snapshot's own error, as takeMemorySnapshot rejects with it. */
async function failedSnapshot(m: MemorySnapshots, session: BackendSession): Promise<unknown> {
  return takeMemorySnapshot(m, session as unknown as CheckpointableSession, 'leftover').then(
    () => assert.fail('the snapshot was made'),
    (err: unknown) => err,
  );
}

const imageExists = (id: string): Promise<boolean> =>
  docker('image', 'inspect', id).then(
    () => true,
    () => false,
  );

test('an image that cannot be removed after a failed memory snapshot is warned and counted; the client gets the snapshot error', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  const { dir, session, store, m, warnings, metrics, failImageOnce } = await setUp(t);
  failImageOnce();
  const err = await failedSnapshot(m, session);
  assert.equal(err, store.thrown[0], `the snapshot's own error, not the clean-up's: ${String(err)}`);

  const warned = warnings.find((w) => w.fields['leftover'] === 'image');
  assert.ok(warned, `no warning of the image left: ${JSON.stringify(warnings)}`);
  assert.equal(warned.fields['sessionId'], session.id);
  const snapshotId = String(warned.fields['snapshotId']);
  assert.match(snapshotId, /^sha256:[0-9a-f]{64}$/);
  assert.match(String(warned.fields['err']), /injected: image remove failed/);
  assert.match(String(warned.fields['failure']), /no space left/);
  assert.ok(await imageExists(snapshotId), 'the image the warning names is the one left on the engine');
  // The checkpoint's removal was still made.
  assert.deepEqual(await readdir(dir), []);
  assert.deepEqual(store.totals.cleanupFailures, { image: 1 });
  const text = await metrics.registry.metrics();
  assert.match(text, /exec_server_snapshot_cleanup_failures_total\{leftover="image"\} 1\n/);
  assert.doesNotMatch(text, /leftover="checkpoint"/);
  // The session was restored and runs on.
  assert.equal((await runScript(session, 'echo alive')).text('stdout'), 'alive\n');
});

test('a checkpoint that cannot be removed after a failed memory snapshot is warned and counted; its image still goes', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  const { dir, session, store, m, warnings, metrics } = await setUp(t);
  store.removeFailures = 1;
  const err = await failedSnapshot(m, session);
  assert.equal(err, store.thrown[0], `the snapshot's own error, not the clean-up's: ${String(err)}`);

  const warned = warnings.find((w) => w.fields['leftover'] === 'checkpoint');
  assert.ok(warned, `no warning of the checkpoint left: ${JSON.stringify(warnings)}`);
  assert.equal(warned.fields['sessionId'], session.id);
  const snapshotId = String(warned.fields['snapshotId']);
  assert.match(String(warned.fields['err']), /checkpoint directory busy/);
  // The checkpoint named is the one left in the store; the image was removed all the same.
  assert.deepEqual(await readdir(dir), [snapshotId.slice('sha256:'.length)]);
  assert.equal(await imageExists(snapshotId), false, 'the image was removed after the checkpoint removal failed');
  assert.deepEqual(store.totals.cleanupFailures, { checkpoint: 1 });
  assert.match(
    await metrics.registry.metrics(),
    /exec_server_snapshot_cleanup_failures_total\{leftover="checkpoint"\} 1\n/,
  );
  assert.equal(warnings.length, 1, `only the checkpoint was left: ${JSON.stringify(warnings)}`);
});

/** A container of the test image on runsc, running `sleep` (or only created), removed when the test ends. */
async function plainContainer(t: TestContext, start: boolean): Promise<Docker.Container> {
  const c = await engine.createContainer({
    Image: TEST_IMAGE,
    Cmd: ['sleep', 'infinity'],
    HostConfig: { Runtime: 'runsc' },
  });
  t.after(() => c.remove({ force: true }).catch(() => undefined));
  if (start) await c.start();
  return c;
}

test('checkpoint mechanics warn of what they leave: earlier checkpoints not deleted, the hibernation file not removed', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 120_000,
}, async (t) => {
  const warnings: Warning[] = [];
  const log = {
    warn: (fields: object, message?: string) => warnings.push({ fields: fields as Record<string, unknown>, message }),
  };
  // Earlier checkpoints cannot be listed (injected on this container handle): the checkpoint is
  // still taken, and the warning names the session.
  const running = await plainContainer(t, true);
  const api = running as unknown as CheckpointApi;
  const list = api.listCheckpoint.bind(api);
  let listFailures = 1;
  api.listCheckpoint = (opts) =>
    listFailures-- > 0 ? Promise.reject(new Error('injected: checkpoint list failed')) : list(opts);
  const inspectRunning = async () => (await running.inspect()).State.Running;
  const frozenAt = await checkpointContainer(
    {
      id: 'cp-session',
      container: running,
      agent: undefined,
      shellPath: '/bin/sh',
      containerRunning: inspectRunning,
      log,
    },
    `${CHECKPOINT_PREFIX}-cleanup`,
    30_000,
  );
  assert.ok(frozenAt > 0);
  assert.equal(await inspectRunning(), false, 'the checkpoint was taken');
  assert.equal(warnings.length, 1, JSON.stringify(warnings));
  assert.equal(warnings[0]?.fields['sessionId'], 'cp-session');
  assert.equal(warnings[0]?.message, 'earlier checkpoints not deleted before a checkpoint');
  assert.match(String(warnings[0]?.fields['err']), /injected: checkpoint list failed/);

  // A container that is not running: the hibernation file cannot be removed (no exec runs).
  warnings.length = 0;
  const stopped = await plainContainer(t, false);
  const quiet = { info: () => undefined, debug: () => undefined, error: () => undefined };
  await clearAfterRestore(stopped, 30_000, { ...quiet, ...log }, 'hf-session');
  const hf = warnings.find((w) => w.message === 'hibernation file not removed after restore');
  assert.ok(hf, `no warning of the hibernation file: ${JSON.stringify(warnings)}`);
  assert.equal(hf.fields['sessionId'], 'hf-session');
  assert.ok(String(hf.fields['err']).length > 0);
});
