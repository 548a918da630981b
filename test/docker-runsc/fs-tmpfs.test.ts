/**
 * Files on mounts the engine's archive API cannot see (gVisor's /tmp tmpfs, Docker's /dev/shm)
 * still have metadata: stat falls back to an exec there.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { dockerTestOptions } from '../docker/engine.ts';
import { makeBackend, RecordingSink, sessionSpec, spawnRequest } from '../docker/helpers.ts';

for (const runtime of ['runc', 'runsc']) {
  test(`${runtime}: stat of files in /tmp and /dev/shm`, dockerTestOptions, async (t) => {
    const backend = makeBackend({ allowedRuntimes: ['runsc'] });
    t.after(() => backend.close());
    const s = await backend.createSession(sessionSpec({ runtime }));
    const sink = new RecordingSink();
    await s.spawn(
      spawnRequest(['sh', '-c', 'printf 12345 > /tmp/f; mkdir -p /tmp/d; ln -s f /tmp/l; printf abc > /dev/shm/g']),
      sink,
    );
    assert.deepEqual(await sink.exited, { kind: 'exited', code: 0 });
    const f = await s.fs.stat('/tmp/f');
    assert.deepEqual([f.isFile, f.isDirectory, f.isSymlink, f.size], [true, false, false, 5]);
    assert.ok(Math.abs(f.modifiedAtMs - Date.now()) < 120_000, 'mtime is now');
    const d = await s.fs.stat('/tmp/d');
    assert.deepEqual([d.isFile, d.isDirectory], [false, true]);
    const l = await s.fs.stat('/tmp/l');
    assert.deepEqual([l.isSymlink, l.isFile, l.size], [true, true, 5]);
    assert.equal((await s.fs.stat('/dev/shm/g')).size, 3);
    await assert.rejects(
      s.fs.stat('/tmp/missing'),
      (err: Error & { code?: string }) => err.code === 'EXEC_ERR_NOT_FOUND',
    );
  });
}
