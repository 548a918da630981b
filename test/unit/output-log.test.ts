/** A process's event log (src/processes/output-log.ts): seqs, the retention window, reads, replay, waits. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { OutputLog } from '../../src/processes/output-log.ts';

const out = (log: OutputLog, text: string, release?: () => void) =>
  log.append({ kind: 'output', stream: 'stdout', data: Buffer.from(text) }, release);
const texts = (chunks: ReadonlyArray<{ data: Buffer }>) => chunks.map((c) => c.data.toString());

test('every event gets the next seq from 1; exit and close are kept and reported', () => {
  const log = new OutputLog(100);
  assert.equal(log.nextSeq, 1);
  assert.equal(out(log, 'a').seq, 1);
  assert.equal(log.append({ kind: 'escalated', reason: 'denied' }).seq, 2);
  const exit = log.append({ kind: 'exited', state: { status: 'exited', exitCode: 0 }, sandboxDenied: false });
  assert.equal(exit.seq, 3);
  assert.equal(log.exit, exit);
  assert.equal(log.closed, false);
  log.append({ kind: 'closed' });
  assert.equal(log.closed, true);
  assert.equal(log.nextSeq, 5);
});

test('the window keeps the newest bytes within the budget, oldest dropped first and released', () => {
  const log = new OutputLog(10);
  const released: string[] = [];
  for (const t of ['aaaa', 'bbbb', 'cccc']) out(log, t, () => released.push(t));
  assert.deepEqual(released, ['aaaa']);
  assert.equal(log.droppedBytes, 4);
  assert.equal(log.firstRetainedSeq, 2);
  const r = log.read(0, 1000);
  assert.deepEqual(texts(r.chunks), ['bbbb', 'cccc']);
  assert.deepEqual([r.nextSeq, r.firstRetainedSeq, r.droppedBytes], [4, 2, 4]);
});

test('one chunk over the budget alone is still kept (the newest is never dropped)', () => {
  const log = new OutputLog(3);
  out(log, 'ab');
  out(log, 'long chunk');
  assert.deepEqual(texts(log.read(0, 100).chunks), ['long chunk']);
  assert.equal(log.droppedBytes, 2);
});

test('read: after a seq, at most maxBytes but at least one chunk; nextSeq says where to go on', () => {
  const log = new OutputLog(1000);
  for (const t of ['12345', '67890', 'abc']) out(log, t);
  const first = log.read(0, 7);
  assert.deepEqual(texts(first.chunks), ['12345']);
  assert.equal(first.nextSeq, 2);
  assert.deepEqual(texts(log.read(1, 1).chunks), ['67890'], 'at least one chunk even over maxBytes');
  assert.deepEqual(texts(log.read(1, 100).chunks), ['67890', 'abc']);
  assert.equal(log.read(3, 100).chunks.length, 0);
  assert.equal(log.read(3, 100).nextSeq, 4);
});

test('eventsAfter: output, escalations, exit and close in seq order', () => {
  const log = new OutputLog(1000);
  out(log, 'x');
  log.append({ kind: 'escalated', reason: 'r' });
  out(log, 'y');
  log.append({ kind: 'exited', state: { status: 'signaled', exitCode: 137, signal: 'SIGKILL' }, sandboxDenied: true });
  log.append({ kind: 'closed' });
  assert.deepEqual(
    log.eventsAfter(0).map((e) => [e.seq, e.kind]),
    [
      [1, 'output'],
      [2, 'escalated'],
      [3, 'output'],
      [4, 'exited'],
      [5, 'closed'],
    ],
  );
  assert.deepEqual(
    log.eventsAfter(3).map((e) => e.kind),
    ['exited', 'closed'],
  );
});

test('resumeAt: seqs continue from the recovered one (never lower), with the dropped bytes counted', () => {
  const log = new OutputLog(100);
  log.resumeAt(40, 1234);
  assert.equal(out(log, 'z').seq, 40);
  log.resumeAt(10);
  assert.equal(out(log, 'z').seq, 41);
  assert.equal(log.droppedBytes, 1234);
  assert.equal(log.firstRetainedSeq, 40);
});

test('listeners hear every event until they unsubscribe', () => {
  const log = new OutputLog(100);
  const heard: number[] = [];
  const off = log.subscribe((e) => heard.push(e.seq));
  out(log, 'a');
  out(log, 'b');
  off();
  out(log, 'c');
  assert.deepEqual(heard, [1, 2]);
});

test('waitFor: at once when there is something newer, else on the next event, the timeout or an abort', async () => {
  const log = new OutputLog(100);
  out(log, 'a');
  await log.waitFor(0, 10_000);
  const waiting = log.waitFor(1, 10_000);
  setImmediate(() => out(log, 'b'));
  await waiting;
  const t0 = Date.now();
  await log.waitFor(2, 30);
  assert.ok(Date.now() - t0 >= 25);
  const ac = new AbortController();
  const aborted = log.waitFor(2, 10_000, ac.signal);
  ac.abort();
  await aborted;
  await log.waitFor(2, 0);
});

test('many evictions compact the storage without changing what is read', () => {
  const log = new OutputLog(10);
  for (let i = 0; i < 5000; i++) out(log, String(i % 10));
  const r = log.read(0, 100);
  assert.deepEqual(texts(r.chunks), ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9']);
  assert.equal(r.firstRetainedSeq, 4991);
  assert.equal(log.droppedBytes, 4990);
});
