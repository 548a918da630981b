/**
 * The body of a download is exactly the length its Content-Length announced, whatever the
 * file does meanwhile (src/transport/http-files.ts `exactly`); the backends' end-to-end cases are
 * in test/fs/download-changing-file.test.ts.
 */
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { exactly } from '../../src/transport/http-files.ts';

/** A source that never ends by itself: a file some writer keeps appending to faster than it is read. */
function endless(): Readable & { reads: number } {
  const source = new Readable({
    read() {
      source.reads++;
      this.push(Buffer.alloc(64 * 1024, 0x61));
    },
  }) as Readable & { reads: number };
  source.reads = 0;
  return source;
}

async function collect(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

test('a source that keeps growing: the body ends at the length and the read stops', async () => {
  const source = endless();
  const body = await collect(exactly(source, 1_000_000, '/w/log'));
  assert.equal(body.length, 1_000_000);
  assert.ok(source.destroyed, 'the backend reader is ended');
  const reads = source.reads;
  assert.ok(reads < 40, `read about the length, not more (${reads} reads of 64 KiB)`);
});

test('a length of zero reads nothing and ends the reader', async () => {
  const source = endless();
  const body = await collect(exactly(source, 0, '/w/log'));
  assert.equal(body.length, 0);
  assert.ok(source.destroyed);
});

test('a source that ends short fails the body with the bytes missing', async () => {
  const source = Readable.from([Buffer.from('abc')], { objectMode: false });
  await assert.rejects(collect(exactly(source, 10, '/w/f')), /\/w\/f shrank by 7 bytes/);
});

test('a source of exactly the length gives it whole', async () => {
  const data = Buffer.from('hello, world');
  const source = Readable.from([data.subarray(0, 5), data.subarray(5)], { objectMode: false });
  assert.ok((await collect(exactly(source, data.length, '/w/f'))).equals(data));
});

test('a client that goes away ends the reader', async () => {
  const source = endless();
  const body = exactly(source, 100_000_000, '/w/f');
  for await (const _ of body) break;
  await new Promise((r) => setImmediate(r));
  assert.ok(source.destroyed, 'the reader is ended with the body');
});
