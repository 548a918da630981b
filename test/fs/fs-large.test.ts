/**
 * A 200 MB file copied into and out of a session over HTTP with bounded server memory and
 * identical checksums; an aborted upload leaves nothing behind. Both backends.
 *
 * The server runs in this process, so the figures cover the server and the (streaming) test
 * client together. Bound asserted for each direction: peak growth of live JS heap plus Buffer
 * memory below 64 MiB and of RSS below 128 MiB for a 200 MiB file (a buffering implementation
 * would grow by at least 200 MiB; test/support/memory.ts says why live memory).
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdtemp, open, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { HttpFiles } from '../../src/client/files.ts';
import { peakGrowth } from '../support/memory.ts';
import { BACKENDS, fsEnv } from './helpers.ts';

const SIZE = 200 * 1024 * 1024;
const BOUND = 64 * 1024 * 1024;

/** Writes SIZE pseudo-random bytes (each MiB block tagged with its index); returns the sha256. */
async function makeFile(path: string): Promise<string> {
  const block = randomBytes(1024 * 1024);
  const hash = createHash('sha256');
  const out = await open(path, 'w');
  try {
    for (let i = 0; i < SIZE / block.length; i++) {
      block.writeUInt32BE(i, 0);
      hash.update(block);
      await out.write(block);
    }
  } finally {
    await out.close();
  }
  return hash.digest('hex');
}

const mib = (n: number): string => (n / 1024 / 1024).toFixed(1);

for (const { kind, options } of BACKENDS) {
  test(`${kind}: a 200 MB file copied in and out over HTTP with bounded memory and identical checksums`, {
    ...options,
    timeout: options.skip ? 1000 : 600_000,
  }, async (t) => {
    const env = await fsEnv(t, kind);
    const dir = await mkdtemp(join(tmpdir(), 'fs-large-'));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const local = join(dir, 'big.bin');
    const expected = await makeFile(local);
    const files = new HttpFiles({ baseUrl: env.server.httpUrl, sessionId: env.session.sessionId });
    const remote = `${env.workdir}/big.bin`;

    const up = await peakGrowth(() => files.upload(remote, createReadStream(local)));
    assert.equal(up.result.bytesWritten, SIZE);
    const inside = (await env.sh(`sha256sum ${remote}`)).split(/\s+/)[0];
    assert.equal(inside, expected, 'checksum inside the session');

    const hash = createHash('sha256');
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        hash.update(chunk);
        cb();
      },
    });
    const down = await peakGrowth(() => files.download(remote, sink));
    assert.equal(down.result, SIZE);
    assert.equal(hash.digest('hex'), expected, 'checksum of the download');

    const report =
      `${kind}: upload ${mib(SIZE)} MiB in ${(up.ms / 1000).toFixed(2)} s (${(SIZE / 1024 / 1024 / (up.ms / 1000)).toFixed(0)} MiB/s, RSS +${mib(up.rss)} MiB, live heap+buffers +${mib(up.live)} MiB); ` +
      `download in ${(down.ms / 1000).toFixed(2)} s (${(SIZE / 1024 / 1024 / (down.ms / 1000)).toFixed(0)} MiB/s, RSS +${mib(down.rss)} MiB, live heap+buffers +${mib(down.live)} MiB)`;
    t.diagnostic(report);
    if (process.env['FS_BENCH_REPORT']) process.stderr.write(`${report}\n`);
    for (const [what, m] of [
      ['upload', up],
      ['download', down],
    ] as const) {
      assert.ok(m.rss < 2 * BOUND, `${what} grew RSS by ${mib(m.rss)} MiB (bound ${mib(2 * BOUND)})`);
      assert.ok(m.live < BOUND, `${what} grew live heap+buffers by ${mib(m.live)} MiB (bound ${mib(BOUND)})`);
    }
  });

  test(
    `${kind}: an upload aborted mid-stream leaves no partial file and the server keeps serving`,
    options,
    async (t) => {
      const env = await fsEnv(t, kind);
      const remote = `${env.workdir}/aborted.bin`;
      const url = `${env.server.httpUrl}/v1/sessions/${env.session.sessionId}/files/content?path=${encodeURIComponent(remote)}`;
      await new Promise<void>((resolve) => {
        const req = request(url, {
          method: 'PUT',
          headers: { 'content-type': 'application/octet-stream', 'content-length': String(10 * 1024 * 1024) },
        });
        req.on('error', () => resolve());
        req.write(randomBytes(1024 * 1024));
        setTimeout(() => {
          req.destroy();
          resolve();
        }, 300);
      });
      const files = new HttpFiles({ baseUrl: env.server.httpUrl, sessionId: env.session.sessionId });
      let gone = false;
      for (let i = 0; i < 100 && !gone; i++) {
        gone = await files.stat(remote).then(
          () => false,
          () => true,
        );
        if (!gone) await new Promise((r) => setTimeout(r, 100));
      }
      assert.ok(gone, 'the partial upload was removed');
      await files.upload(`${env.workdir}/after.txt`, Buffer.from('still fine'));
      assert.equal((await files.stat(`${env.workdir}/after.txt`)).size, 10);
    },
  );
}
