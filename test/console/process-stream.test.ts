/**
 * The console's follower (web/src/process-stream.ts) against a scripted log: history, live
 * notifications, a reconnect in the middle of a stream, and retention drops. The end-to-end
 * version of the reconnect runs in the browser tests; this one pins each ordering case.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ProcessFollower, type ProcessEvent, type ReadAnswer } from '../../web/src/process-stream.ts';

type Ev = { seq: number; kind: 'out'; text: string } | { seq: number; kind: 'exit' } | { seq: number; kind: 'esc' };

/** A process log as the server keeps it: every event one seq, reads return output only. */
class Log {
  events: Ev[] = [];
  firstRetained = 1;
  dropped = 0;
  out(text: string): ProcessEvent {
    const seq = this.events.length + 1;
    this.events.push({ seq, kind: 'out', text });
    return {
      method: 'process/output',
      processId: 'p',
      seq,
      stream: 'stdout',
      chunk: Buffer.from(text).toString('base64'),
    };
  }
  esc(): ProcessEvent {
    const seq = this.events.length + 1;
    this.events.push({ seq, kind: 'esc' });
    return { method: 'process/escalated', processId: 'p', seq, reason: 'denied' };
  }
  exit(): ProcessEvent {
    const seq = this.events.length + 1;
    this.events.push({ seq, kind: 'exit' });
    return { method: 'process/exited', processId: 'p', seq, exitCode: 0, terminal: 'exited', sandboxDenied: false };
  }
  read(afterSeq: number, maxChunks: number): ReadAnswer {
    const outs = this.events.filter(
      (e): e is Extract<Ev, { kind: 'out' }> => e.kind === 'out' && e.seq > afterSeq && e.seq >= this.firstRetained,
    );
    const chunks = outs.slice(0, maxChunks);
    const truncated = chunks.length < outs.length;
    const last = chunks[chunks.length - 1];
    const exited = this.events.some((e) => e.kind === 'exit');
    return {
      chunks: chunks.map((c) => ({ seq: c.seq, stream: 'stdout', chunk: Buffer.from(c.text).toString('base64') })),
      nextSeq: truncated && last ? last.seq + 1 : this.events.length + 1,
      exited,
      exitCode: exited ? 0 : null,
      terminal: exited ? 'exited' : null,
      signal: null,
      sandboxDenied: false,
      firstRetainedSeq: this.firstRetained,
      droppedBytes: this.dropped,
    };
  }
}

function follower(log: Log, maxChunks = 2, beforeAnswer?: () => void) {
  const seen: string[] = [];
  let reads = 0;
  const f = new ProcessFollower(
    async (afterSeq) => {
      reads++;
      beforeAnswer?.();
      return log.read(afterSeq, maxChunks);
    },
    {
      output: (_s, d) => seen.push(Buffer.from(d).toString()),
      dropped: (n) => seen.push(`[dropped ${n}]`),
      escalated: () => seen.push('[escalated]'),
      ended: () => seen.push('[end]'),
    },
  );
  return { f, seen, reads: () => reads };
}

test('history in several reads, then live notifications, each byte once and in order', async () => {
  const log = new Log();
  for (const t of ['a', 'b', 'c', 'd', 'e']) log.out(t);
  const { f, seen } = follower(log);
  await f.sync();
  assert.deepEqual(seen, ['a', 'b', 'c', 'd', 'e']);
  f.notify(log.out('f'));
  f.notify(log.esc());
  f.notify(log.out('g'));
  f.notify(log.exit());
  assert.deepEqual(seen, ['a', 'b', 'c', 'd', 'e', 'f', '[escalated]', 'g', '[end]']);
  assert.equal(f.lastSeq, 9);
});

test('notifications that arrive while history is read are buffered, not lost or doubled', async () => {
  const log = new Log();
  log.out('a');
  log.out('b');
  let pushed = false;
  let live: ProcessEvent[] = [];
  const { f, seen } = follower(log, 1, () => {
    // The process keeps writing while the first read is on its way.
    if (!pushed) {
      pushed = true;
      live = [log.out('c'), log.out('d')];
    }
  });
  const syncing = f.sync();
  for (const n of live) f.notify(n);
  await syncing;
  for (const n of live) f.notify(n);
  f.notify(log.out('e'));
  assert.deepEqual(seen, ['a', 'b', 'c', 'd', 'e']);
});

test('after a dropped socket, the gap is read from the last seq and live output continues', async () => {
  const log = new Log();
  const { f, seen } = follower(log, 3);
  await f.sync();
  f.notify(log.out('1'));
  f.notify(log.out('2'));
  // The socket is down: these happen unseen.
  for (const t of ['3', '4', '5', '6', '7']) log.out(t);
  // Reconnected: the new connection's first notification is past a gap.
  f.notify(log.out('8'));
  await new Promise((r) => setTimeout(r, 10));
  f.notify(log.out('9'));
  assert.deepEqual(seen.join(''), '123456789');
});

test('output the server no longer retains is reported, not silently skipped', async () => {
  const log = new Log();
  for (const t of ['x', 'y', 'z']) log.out(t);
  log.firstRetained = 3;
  log.dropped = 2;
  const { f, seen } = follower(log);
  await f.sync();
  assert.deepEqual(seen, ['[dropped 2]', 'z']);
});

test('a stopped follower applies nothing more', async () => {
  const log = new Log();
  const { f, seen } = follower(log);
  await f.sync();
  f.stop();
  f.notify(log.out('late'));
  assert.deepEqual(seen, []);
});
