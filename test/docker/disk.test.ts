/**
 * The docker side of the disk limit against the real engine: whether the engine takes
 * `StorageOpt size` is learned from the first create (on overlay2 over ext4 it refuses), the
 * warm pool hands out a container only when its engine limit cannot differ from the session's,
 * and `disk.usage()` reads the writable layer, the workspace included.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { DockerBackend } from '../../src/backends/docker/index.ts';
import { isStorageOptUnsupported } from '../../src/backends/docker/container/disk.ts';
import { dockerTestOptions } from './engine.ts';
import { docker, makeBackend, poolContainerIds, RecordingSink, sessionSpec, spawnRequest } from './helpers.ts';

const backends: DockerBackend[] = [];
after(async () => {
  for (const b of backends) await b.close().catch(() => undefined);
});

const MIB = 1024 * 1024;

test('the engine refusals of StorageOpt are recognised, other create errors are not', () => {
  assert.equal(
    isStorageOptUnsupported(
      new Error("container create: --storage-opt is supported only for overlay over xfs with 'pquota' mount option"),
    ),
    true,
  );
  assert.equal(isStorageOptUnsupported(new Error('container create: Storage Opt size not supported')), true);
  assert.equal(isStorageOptUnsupported(new Error('container create: No such image: exec-server-test:latest')), false);
  assert.equal(
    isStorageOptUnsupported(new Error('container create: Conflict. The container name "/x" is already in use')),
    false,
  );
});

test(
  'warm pool and disk limit: a pooled container never carries another engine limit; usage reads the writable layer',
  dockerTestOptions,
  async () => {
    const backend = makeBackend({
      warmPoolSize: 1,
      defaultResources: { memoryMb: 512, cpus: 1, pids: 256, diskMb: 64 },
    });
    backends.push(backend);
    assert.equal(await backend.poolFull(60_000), true);
    const poolId = (await poolContainerIds(backend)).join('\n');
    assert.notEqual(poolId, '');
    const storageOpt = (await docker('inspect', '-f', '{{json .HostConfig.StorageOpt}}', poolId)).trim();
    const engineLimits = storageOpt.includes('"size"');
    console.log(
      `# the engine ${engineLimits ? 'enforces' : 'does not enforce'} StorageOpt size (pool container: ${storageOpt})`,
    );

    const other = await backend.createSession(
      sessionSpec({ resources: { memoryMb: 512, cpus: 1, pids: 256, diskMb: 128 } }),
    );
    if (engineLimits) {
      assert.notEqual(other.containerId, poolId, 'a session asking for another limit gets its own container');
      assert.equal(other.disk?.enforcement, 'engine');
      assert.match(
        (await docker('inspect', '-f', '{{json .HostConfig.StorageOpt}}', other.containerId!)).trim(),
        /"size":"128m"/,
      );
    } else {
      // The limit is the server's watch, not the container's: the pooled container fits any diskMb.
      assert.equal(other.containerId, poolId, 'under the watch any diskMb takes the pooled container');
      assert.equal(other.disk?.enforcement, 'watch');
      const own = await backend.createSession(sessionSpec({ network: true }));
      assert.equal(own.disk?.enforcement, 'watch', 'later creates do not ask the engine again');
      assert.equal((await docker('inspect', '-f', '{{json .HostConfig.StorageOpt}}', own.containerId!)).trim(), 'null');
    }

    const before = await other.disk!.usage();
    const sink = new RecordingSink();
    await other.spawn(
      spawnRequest(['sh', '-c', 'dd if=/dev/zero of=/workspace/f bs=1048576 count=8 2>/dev/null && sync']),
      sink,
    );
    assert.deepEqual(await sink.exited, { kind: 'exited', code: 0 });
    const grown = await other.disk!.usage();
    assert.ok(grown - before >= 8 * MIB, `writable layer grew by ${grown - before} bytes`);
  },
);
