import assert from 'node:assert/strict';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { test } from 'node:test';
import { OutputLog } from '../../src/processes/output-log.ts';
import { SlabWriter } from '../../src/processes/output-slabs.ts';

/** A 16 KiB chunk whose every byte says which chunk it is. */
const chunk = (n: number): Buffer => Buffer.alloc(16 * 1024, n % 251);

/** Streams `count` chunks through a writer into a log with `retention` bytes, a turn apart. */
async function stream(log: OutputLog, writer: SlabWriter, count: number, onAppend?: (n: number, data: Buffer) => void): Promise<void> {
  for (let n = 0; n < count; n++) {
    const { data, release } = writer.copy([chunk(n).subarray(0, 6000), chunk(n).subarray(6000)], 16 * 1024);
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
    for (const c of chunks) assert.ok(c.data.every((b) => b === (c.seq - 1) % 251), `chunk ${c.seq} was overwritten`);
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
    const { data, release } = writer.copy([Buffer.alloc(16 * 1024, 0xee)], 16 * 1024);
    log.append({ kind: 'output', stream: 'stdout', data }, release);
  }
  assert.ok(first.data.equals(expected), 'a chunk dropped in this turn was overwritten in the same turn');
  writer.close();
});

test('output slabs: small or early output is a plain copy, never a view of the caller\'s buffer', () => {
  const writer = new SlabWriter();
  const source = Buffer.from('hello\n');
  const { data, release } = writer.copy([source], source.length);
  assert.equal(release, undefined);
  source.fill(0);
  assert.equal(data.toString(), 'hello\n');
  writer.close();
});
