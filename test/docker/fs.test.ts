/** SessionFs of a container: round trips, errors, and a 200 MB file streamed with bounded memory. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { dockerTestOptions } from './engine.ts';
import { RecordingSink, sharedSession, spawnRequest } from './helpers.ts';

const shared = sharedSession();

test('write, read, stat, list, copy, remove round trip', dockerTestOptions, async () => {
  const fs = shared.session.fs;
  await fs.createDirectory('/workspace/d/e', true);
  await assert.rejects(fs.createDirectory('/workspace/d', false), { code: 'EXEC_ERR_FS' });
  await fs.writeFile('/workspace/d/a.txt', Buffer.from('hello'));
  assert.equal((await fs.readFile('/workspace/d/a.txt', 1024)).toString(), 'hello');
  const st = await fs.stat('/workspace/d/a.txt');
  assert.equal(st.isFile, true);
  assert.equal(st.isDirectory, false);
  assert.equal(st.size, 5);
  assert.ok(Math.abs(st.modifiedAtMs - Date.now()) < 60_000);
  assert.equal((await fs.stat('/workspace/d')).isDirectory, true);
  const names = (await fs.readDirectory('/workspace/d')).map((e) => `${e.fileName}:${e.isDirectory ? 'd' : e.isFile ? 'f' : 'o'}`).sort();
  assert.deepEqual(names, ['a.txt:f', 'e:d']);
  await fs.writeFile('/workspace/d/.hidden name', Buffer.from(''));
  assert.ok((await fs.readDirectory('/workspace/d')).some((e) => e.fileName === '.hidden name'));
  await fs.copy('/workspace/d', '/workspace/d2', true);
  assert.equal((await fs.readFile('/workspace/d2/a.txt', 1024)).toString(), 'hello');
  await assert.rejects(fs.copy('/workspace/d', '/workspace/d3', false), { code: 'EXEC_ERR_FS' });
  await assert.rejects(fs.remove('/workspace/d2', false, false), { code: 'EXEC_ERR_FS' });
  await fs.remove('/workspace/d2', true, false);
  await assert.rejects(fs.stat('/workspace/d2'), { code: 'EXEC_ERR_NOT_FOUND' });
  await fs.remove('/workspace/d2', true, true);
  await assert.rejects(fs.remove('/workspace/d2', true, false), { code: 'EXEC_ERR_NOT_FOUND' });
  // The file written through fs is visible to commands.
  const sink = new RecordingSink();
  await shared.session.spawn(spawnRequest(['cat', '/workspace/d/a.txt']), sink);
  await sink.exited;
  assert.equal(sink.text(), 'hello');
});

test('errors map to the registry', dockerTestOptions, async () => {
  const fs = shared.session.fs;
  await assert.rejects(fs.readFile('/nope', 10), { code: 'EXEC_ERR_NOT_FOUND' });
  await assert.rejects(fs.stat('/nope/x'), { code: 'EXEC_ERR_NOT_FOUND' });
  await assert.rejects(fs.readDirectory('/nope'), { code: 'EXEC_ERR_NOT_FOUND' });
  await assert.rejects(fs.writeFile('/nope/x', Buffer.from('x')), { code: 'EXEC_ERR_NOT_FOUND' });
  await assert.rejects(fs.readFile('/workspace', 10), { code: 'EXEC_ERR_INVALID_REQUEST' });
  await assert.rejects(fs.openRead('/nope', 0), { code: 'EXEC_ERR_NOT_FOUND' });
  await fs.writeFile('/workspace/big', Buffer.alloc(100, 1));
  await assert.rejects(fs.readFile('/workspace/big', 99), { code: 'EXEC_ERR_TOO_LARGE' });
  assert.equal((await fs.readFile('/workspace/big', 100)).length, 100);
});

test('realpath and symlinks', dockerTestOptions, async () => {
  const fs = shared.session.fs;
  const sink = new RecordingSink();
  await shared.session.spawn(spawnRequest(['sh', '-c', 'mkdir -p /workspace/real && ln -sfn /workspace/real /workspace/link']), sink);
  await sink.exited;
  assert.equal(await fs.realpath('/workspace/link'), '/workspace/real');
  assert.equal(await fs.realpath('/workspace/link/missing/x'), '/workspace/real/missing/x');
  assert.equal(await fs.realpath('/workspace/./real/../link'), '/workspace/real');
  const st = await fs.stat('/workspace/link');
  assert.equal(st.isSymlink, true);
  assert.equal(st.isDirectory, true);
  const entry = (await fs.readDirectory('/workspace')).find((e) => e.fileName === 'link');
  assert.equal(entry?.isDirectory, true);
});

test('openRead with offset', dockerTestOptions, async () => {
  await shared.session.fs.writeFile('/workspace/off.txt', Buffer.from('0123456789'));
  const chunks: Buffer[] = [];
  for await (const c of await shared.session.fs.openRead('/workspace/off.txt', 4)) chunks.push(c as Buffer);
  assert.equal(Buffer.concat(chunks).toString(), '456789');
});

test('200 MB file: writeStream and openRead with checksums and bounded memory', { ...dockerTestOptions, timeout: 300_000 }, async () => {
  const SIZE = 200 * 1024 * 1024;
  const CHUNK = 1024 * 1024;
  // Live memory, not garbage: 200 one-MiB chunks pass through, and V8 frees their buffers only
  // when its external-memory trigger fires, so a peak of RSS alone says more about the GC than
  // about buffering. The sampler collects before each reading of heap plus buffers.
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  const base = process.memoryUsage();
  let peakRss = base.rss;
  const liveOf = (m: NodeJS.MemoryUsage): number => m.heapUsed + m.arrayBuffers;
  let peakLive = liveOf(base);
  const sampler = setInterval(() => {
    gc();
    const m = process.memoryUsage();
    peakRss = Math.max(peakRss, m.rss);
    peakLive = Math.max(peakLive, liveOf(m));
  }, 50);
  // A generated stream (pseudo-random, so compression or sparse tricks cannot help).
  const hashIn = createHash('sha256');
  let produced = 0;
  let seed = 12345;
  const source = new Readable({
    read() {
      if (produced >= SIZE) {
        this.push(null);
        return;
      }
      const buf = Buffer.allocUnsafe(CHUNK);
      for (let i = 0; i < CHUNK; i += 4) {
        seed = (seed * 1103515245 + 12345) >>> 0;
        buf.writeUInt32LE(seed, i);
      }
      produced += CHUNK;
      hashIn.update(buf);
      this.push(buf);
    },
  });
  let t = Date.now();
  const written = await shared.session.fs.writeStream('/workspace/big.bin', source);
  const writeMs = Date.now() - t;
  assert.equal(written, SIZE);
  assert.equal((await shared.session.fs.stat('/workspace/big.bin')).size, SIZE);

  t = Date.now();
  const hashOut = createHash('sha256');
  let read = 0;
  for await (const c of await shared.session.fs.openRead('/workspace/big.bin', 0)) {
    hashOut.update(c as Buffer);
    read += (c as Buffer).length;
  }
  const readMs = Date.now() - t;
  clearInterval(sampler);
  assert.equal(read, SIZE);
  assert.equal(hashOut.digest('hex'), hashIn.digest('hex'));
  // In the container too.
  const sink = new RecordingSink();
  await shared.session.spawn(spawnRequest(['sh', '-c', 'sha256sum /workspace/big.bin | cut -c1-64']), sink);
  await sink.exited;
  const growthMb = (peakRss - base.rss) / 1024 / 1024;
  const liveMb = (peakLive - liveOf(base)) / 1024 / 1024;
  console.log(
    `# 200 MB: write ${writeMs} ms (${((SIZE / 1024 / 1024) / (writeMs / 1000)).toFixed(0)} MB/s), read ${readMs} ms (${((SIZE / 1024 / 1024) / (readMs / 1000)).toFixed(0)} MB/s), peak RSS growth ${growthMb.toFixed(1)} MB, live heap+buffers ${liveMb.toFixed(1)} MB`,
  );
  // Bounded by the stdin budget (8 MiB) and the output window (at most 2 MiB) plus chunks in
  // hand; a buffering implementation would hold the whole 200 MB.
  assert.ok(liveMb < 48, `live heap+buffers grew by ${liveMb.toFixed(1)} MB while streaming 200 MB`);
  assert.ok(growthMb < 200, `RSS grew by ${growthMb.toFixed(1)} MB while streaming 200 MB`);
});
