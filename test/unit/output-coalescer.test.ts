/** Output into the log (src/processes/output-coalescer.ts): merged within a turn, split at 16 KiB, one stream per chunk. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { OutputCoalescer } from '../../src/processes/output-coalescer.ts';
import { OutputLog } from '../../src/processes/output-log.ts';

const CHUNK = 16 * 1024;

function setup() {
  const log = new OutputLog(1 << 24);
  const sizes: number[] = [];
  const c = new OutputCoalescer(log, (n) => sizes.push(n));
  const chunks = () => log.read(0, 1 << 30).chunks.map((ch) => [ch.stream, ch.data.toString()]);
  return { log, c, sizes, chunks };
}

test('writes within one turn become one chunk, appended on the next turn', async () => {
  const { c, sizes, chunks } = setup();
  c.publish('stdout', Buffer.from('a'));
  c.publish('stdout', Buffer.from('b'));
  assert.deepEqual(chunks(), [], 'nothing before the turn ends');
  await nextTurn();
  assert.deepEqual(chunks(), [['stdout', 'ab']]);
  assert.deepEqual(sizes, [2]);
  c.close();
});

test('a change of stream flushes what was queued first', async () => {
  const { c, chunks } = setup();
  c.publish('stdout', Buffer.from('out'));
  c.publish('stderr', Buffer.from('err'));
  c.publish('stdout', Buffer.from('more'));
  c.flush();
  assert.deepEqual(chunks(), [
    ['stdout', 'out'],
    ['stderr', 'err'],
    ['stdout', 'more'],
  ]);
  c.close();
});

test('a big write is split into 16 KiB chunks at once; the remainder waits for the turn', async () => {
  const { c, sizes, log } = setup();
  const data = Buffer.alloc(CHUNK * 2 + 100, 'x');
  c.publish('pty', data);
  assert.deepEqual(sizes, [CHUNK, CHUNK]);
  await nextTurn();
  assert.deepEqual(sizes, [CHUNK, CHUNK, 100]);
  const all = Buffer.concat(log.read(0, 1 << 30).chunks.map((ch) => ch.data));
  assert.ok(all.equals(data));
  c.close();
});

test('queued bytes that would pass 16 KiB go first, so no chunk is bigger', () => {
  const { c, sizes } = setup();
  c.publish('stdout', Buffer.alloc(CHUNK - 10));
  c.publish('stdout', Buffer.alloc(20));
  assert.deepEqual(sizes, [CHUNK - 10]);
  c.flush();
  assert.deepEqual(sizes, [CHUNK - 10, 20]);
  c.flush();
  assert.deepEqual(sizes, [CHUNK - 10, 20], 'an empty flush appends nothing');
  c.close();
});
