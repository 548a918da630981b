import assert from 'node:assert/strict';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { test } from 'node:test';
import { OutputLog } from '../../src/processes/output-log.ts';
import { SlabWriter } from '../../src/processes/output-slabs.ts';

/** A 16 KiB chunk whose every byte says which chunk it is. */
const chunk = (n: number): Buffer => Buffer.alloc(16 * 1024, n % 251);

/** Streams `count` chunks through a writer into a log with `retention` bytes, a turn apart. */
async function stream(
  log: OutputLog,
  writer: SlabWriter,
  count: number,
  onAppend?: (n: number, data: Buffer) => void,
): Promise<void> {
  for (let n = 0; n < count; n++) {
    writer.append(chunk(n).subarray(0, 6000));
    writer.append(chunk(n).subarray(6000));
    const { data, release } = writer.take()!;
    log.append({ kind: 'output', stream: 'stdout', data }, release);
    onAppend?.(n, data);
    await nextTurn();
  }
}

test('output slabs: retained chunks keep their bytes while storage of dropped ones is reused', async () => {
  const log = new OutputLog(256 * 1024);
  const writer = new SlabWriter();
  const stores = new Set<ArrayBuffer>();
  let afterPlain = 0;
  // 8 MiB through a 256 KiB retention: the first MiB is plain copies, then slabs.
  await stream(log, writer, 512, (n, data) => {
    if (n * 16 * 1024 >= 1024 * 1024) {
      stores.add(data.buffer as ArrayBuffer);
      afterPlain++;
    }
    // Every chunk still retained reads back exactly as written, after every append.
    const { chunks } = log.read(0, Number.MAX_SAFE_INTEGER);
    for (const c of chunks)
      assert.ok(
        c.data.every((b) => b === (c.seq - 1) % 251),
        `chunk ${c.seq} was overwritten`,
      );
  });
  assert.equal(log.read(0, Number.MAX_SAFE_INTEGER).chunks.length, 16);
  // 448 slab chunks (7 MiB) came from a handful of recycled 256 KiB slabs, not 28 fresh ones.
  assert.equal(afterPlain, 448);
  assert.ok(stores.size <= 4, `${stores.size} distinct slabs for 7 MiB`);
  writer.close();
});

test('output slabs: a dropped chunk stays intact until the end of the turn that dropped it', async () => {
  const log = new OutputLog(16 * 1024);
  const writer = new SlabWriter();
  await stream(log, writer, 80); // past the plain-copy start
  const first = log.read(0, Number.MAX_SAFE_INTEGER).chunks[0];
  assert.ok(first);
  const expected = Buffer.from(first.data);
  // Within one turn: drop it (the next append evicts it) and write more than two slabs' worth.
  for (let n = 0; n < 40; n++) {
    writer.append(Buffer.alloc(16 * 1024, 0xee));
    const { data, release } = writer.take()!;
    log.append({ kind: 'output', stream: 'stdout', data }, release);
  }
  assert.ok(first.data.equals(expected), 'a chunk dropped in this turn was overwritten in the same turn');
  writer.close();
});

test('output slabs: appended bytes are copied at once, in both modes; nothing pending, nothing taken', () => {
  const writer = new SlabWriter();
  assert.equal(writer.take(), undefined);
  const source = Buffer.from('hello\n');
  writer.append(source);
  source.fill(0); // the backend reuses its buffer right after the call
  const early = writer.take()!;
  assert.equal(early.release, undefined, 'early output is a plain copy');
  assert.equal(early.data.toString(), 'hello\n');
  for (let i = 0; i < 64; i++) writer.append(Buffer.alloc(16 * 1024)); // past the plain first MiB
  while (writer.take()) {}
  const reused = Buffer.from('streamed\n');
  writer.append(reused);
  reused.fill(0);
  const late = writer.take()!;
  assert.notEqual(late.release, undefined, 'streaming output lives in a slab');
  assert.equal(late.data.toString(), 'streamed\n');
  writer.close();
});

test('output slabs: an open chunk that outgrows its slab moves whole to a fresh one', () => {
  const writer = new SlabWriter();
  for (let i = 0; i < 64; i++) writer.append(Buffer.alloc(16 * 1024));
  while (writer.take()) {}
  // 250 KiB taken from the first slab, then a chunk of 3 x 4 KiB crossing its end.
  for (let i = 0; i < 25; i++) {
    writer.append(Buffer.alloc(10 * 1024, 1));
    writer.take();
  }
  for (const b of [0xa, 0xb, 0xc]) writer.append(Buffer.alloc(4096, b));
  const { data } = writer.take()!;
  assert.equal(data.length, 3 * 4096);
  assert.deepEqual([data[0], data[4096], data[8191], data[8192], data[12287]], [0xa, 0xb, 0xb, 0xc, 0xc]);
  writer.close();
});
