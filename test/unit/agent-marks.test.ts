/**
 * Acknowledgement marks the agent never read (src/backends/docker/agent/agent-process.ts,
 * agent-channel.ts): output published while the agent's connection is being let go (a detach
 * before a checkpoint) keeps its mark with the server, which a fork adopts its processes with,
 * so each chunk the source published keeps its seq; the source's agent gets them on the next bind.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { keptProcess, withMarks } from '../../src/backends/docker/agent/kept-process.ts';
import type { AgentConnection, ListedProcess } from '../../src/backends/docker/agent/agent-connection.ts';
import { AgentProcess } from '../../src/backends/docker/agent/agent-process.ts';

/** A connection that records what is sent to the agent. */
function fakeConnection(detaching: boolean): { conn: AgentConnection; sent: Buffer[] } {
  const sent: Buffer[] = [];
  const conn = { closed: false, detaching, send: (b: Buffer) => sent.push(b), listen: () => undefined };
  return { conn: conn as unknown as AgentConnection, sent };
}

/** The [seq, end] marks of an ACK frame (12-byte header, then 16 bytes a mark). */
function marksOf(frame: Buffer): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (let o = 12; o + 16 <= frame.length; o += 16)
    out.push([Number(frame.readBigUInt64LE(o)), Number(frame.readBigUInt64LE(o + 8))]);
  return out;
}

test('marks published during a detach are kept by the server and sent on the next bind', () => {
  const proc = new AgentProcess({
    handle: 3,
    mode: 'pipe',
    sandboxType: 'none',
    sink: { output: () => undefined, exit: () => undefined },
    done: () => undefined,
  });
  const live = fakeConnection(false);
  proc.bind(live.conn);
  proc.acknowledge(1, 10);
  assert.deepEqual(marksOf(live.sent.at(-1)!), [[1, 10]], 'a live connection: sent at once');
  assert.deepEqual(proc.unsentMarks, []);

  const leaving = fakeConnection(true);
  proc.bind(leaving.conn);
  proc.acknowledge(2, 20);
  proc.acknowledge(3, 30);
  assert.equal(leaving.sent.length, 0, 'the agent reads nothing more after DETACH');
  assert.deepEqual(proc.unsentMarks, [
    [2, 20],
    [3, 30],
  ]);

  const back = fakeConnection(false);
  proc.bind(back.conn);
  assert.deepEqual(marksOf(back.sent[0]!), [
    [2, 20],
    [3, 30],
  ]);
  assert.deepEqual(proc.unsentMarks, [], 'sent once');
});

test('a fork adopts with the source marks: every published chunk under its seq', () => {
  const output = [0, 10, 20, 30].map((offset) => ({
    stream: 'stdout' as const,
    offset,
    data: Buffer.from(`${'x'.repeat(9)}\n`.slice(0, offset === 30 ? 5 : 10)),
  }));
  const listed: ListedProcess = {
    handle: 3,
    record: { tag: 'none\n{}', mode: 'pipe', pid: 9, firstOffset: 0, totalOffset: 35, marks: [[1, 10]] },
    output,
    exit: undefined,
  };
  // Without the server's marks the output after the agent's last one has no seq (a new one each fork).
  const without = keptProcess(listed).chunks.map((c) => [c.seq, c.data.length]);
  assert.deepEqual(without, [
    [1, 10],
    [undefined, 10],
    [undefined, 10],
    [undefined, 5],
  ]);
  // With them (the checkpoint's meta): the source's chunks under their seqs, then what it never published.
  const kept = keptProcess(
    withMarks(listed, [
      [1, 10],
      [2, 20],
      [3, 30],
    ]),
  ).chunks.map((c) => [c.seq, c.data.length]);
  assert.deepEqual(kept, [
    [1, 10],
    [2, 10],
    [3, 10],
    [undefined, 5],
  ]);
});
