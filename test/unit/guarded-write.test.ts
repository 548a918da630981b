/** Streamed writes (src/sessions/files/guarded-write.ts) into a fake session filesystem: whole, aborted, refused. */
import assert from 'node:assert/strict';
import { PassThrough, Readable } from 'node:stream';
import { test } from 'node:test';
import { execError } from '../../src/errors.ts';
import { guardedWrite } from '../../src/sessions/files/guarded-write.ts';

/** A filesystem that stores what is streamed to it; `failWith` makes writeStream fail after reading. */
function memoryFs(failWith?: Error) {
  const files = new Map<string, Buffer>();
  const removed: string[] = [];
  const fs = {
    writeStream: async (path: string, data: NodeJS.ReadableStream) => {
      const parts: Buffer[] = [];
      for await (const chunk of data as AsyncIterable<Buffer>) parts.push(chunk);
      files.set(path, Buffer.concat(parts));
      if (failWith) throw failWith;
      return Buffer.concat(parts).length;
    },
    remove: async (path: string) => {
      removed.push(path);
      files.delete(path);
    },
  };
  return { files, removed, fs: () => fs as never };
}

test('the whole source is written and its size returned', async () => {
  const m = memoryFs();
  const bytes = await guardedWrite(m.fs, '/w/f', Readable.from([Buffer.from('hello '), Buffer.from('world')]));
  assert.equal(bytes, 11);
  assert.equal(m.files.get('/w/f')?.toString(), 'hello world');
});

test('a source that fails midway: the partial file is removed and the failure reported with the path', async () => {
  const m = memoryFs();
  const source = new PassThrough();
  const writing = guardedWrite(m.fs, '/w/f', source);
  source.write('part');
  setImmediate(() => source.destroy(new Error('client went away')));
  await assert.rejects(writing, {
    code: 'EXEC_ERR_FS',
    message: '/w/f: write aborted: client went away; the partial file was removed',
    detail: { path: '/w/f' },
  });
  assert.deepEqual(m.removed, ['/w/f']);
  assert.equal(m.files.has('/w/f'), false);
});

test('a source closed before its end counts as aborted', async () => {
  const m = memoryFs();
  const source = new PassThrough();
  const writing = guardedWrite(m.fs, '/w/f', source);
  source.write('x');
  setImmediate(() => source.destroy());
  await assert.rejects(writing, { message: /the upload ended before its last byte/ });
  assert.deepEqual(m.removed, ['/w/f']);
});

test("the backend's own refusal is reported as it is, and the file left to the backend", async () => {
  const m = memoryFs(execError('EXEC_ERR_DISK_LIMIT', 'disk full'));
  await assert.rejects(guardedWrite(m.fs, '/w/f', Readable.from([Buffer.from('x')])), {
    code: 'EXEC_ERR_DISK_LIMIT',
  });
  assert.deepEqual(m.removed, []);
});

test('a session already gone rejects the promise instead of throwing at the caller', async () => {
  const gone = () => {
    throw execError('EXEC_ERR_SESSION_DEAD', 'gone');
  };
  const p = guardedWrite(gone, '/w/f', Readable.from([]));
  await assert.rejects(p, { code: 'EXEC_ERR_SESSION_DEAD' });
});
