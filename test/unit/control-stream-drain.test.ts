/**
 * A control command's stdout read as a stream through the exec agent (control-runner.ts): the
 * reader holds it (an open `fs/readBlock` handle that read its block and waits) while the chunks
 * the agent sent before it saw the pause keep arriving. Each of them finds the stream full; they
 * share one wait for the reader, so no MaxListenersExceededWarning, and the command is paused
 * until the reader drains it and resumed once.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ProcessSink } from '../../src/backends/types.ts';
import type { AgentChannel } from '../../src/backends/docker/agent/agent-channel.ts';
import { agentRunner } from '../../src/backends/docker/exec/control-runner.ts';

const CHUNK = 64 * 1024;
/** Chunks delivered while the reader waits: the stream holds 256 KiB, the rest find it full. */
const CHUNKS = 24;

/** A channel whose one command is this test's: its output is pushed by hand; pauses are counted. */
function fakeChannel(): { channel: AgentChannel; sink: () => ProcessSink; pauses: number[]; resumes: number[] } {
  let captured: ProcessSink | undefined;
  const pauses: number[] = [];
  const resumes: number[] = [];
  const proc = {
    pauseOutput: () => pauses.push(Date.now()),
    resumeOutput: () => resumes.push(Date.now()),
    signal: async () => undefined,
    dispose: () => undefined,
  };
  const channel = {
    spawn: async (_request: unknown, sink: ProcessSink) => {
      captured = sink;
      return proc;
    },
  } as unknown as AgentChannel;
  const sink = (): ProcessSink => {
    assert.ok(captured, 'the command was started');
    return captured;
  };
  return { channel, sink, pauses, resumes };
}

test('a streamed control command: chunks arriving while the reader waits share one drain wait', async (t) => {
  const warnings: Error[] = [];
  const onWarning = (w: Error): void => void warnings.push(w);
  process.on('warning', onWarning);
  t.after(() => process.off('warning', onWarning));

  const { channel, sink, pauses, resumes } = fakeChannel();
  const { stdout, done } = await agentRunner(channel, {}).stream({
    cmd: ['cat', '/big'],
    timeoutMs: 10_000,
    failure: () => undefined,
  });
  for (let i = 0; i < CHUNKS; i++) sink().output('stdout', Buffer.alloc(CHUNK, i));
  assert.ok(pauses.length > 10, `more than ten chunks found the stream full (${pauses.length})`);
  // A warning is emitted on the next tick: let it come if it would.
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(
    warnings.filter((w) => w.name === 'MaxListenersExceededWarning').map((w) => w.message),
    [],
  );
  assert.equal(stdout.listenerCount('drain'), 1, 'one wait for the reader');
  assert.equal(resumes.length, 0, 'paused while the reader waits');

  // The reader reads everything: the command is resumed once, and every byte arrived in order.
  const read: Buffer[] = [];
  stdout.on('data', (d: Buffer) => read.push(d));
  const ended = new Promise<void>((resolve) => stdout.once('end', resolve));
  await new Promise<void>((resolve) => stdout.once('drain', resolve));
  assert.equal(resumes.length, 1);
  assert.equal(stdout.listenerCount('drain'), 0);
  sink().exit({ kind: 'exited', code: 0 });
  await ended;
  assert.equal((await done).exitCode, 0);
  const all = Buffer.concat(read);
  assert.equal(all.length, CHUNKS * CHUNK);
  for (let i = 0; i < CHUNKS; i++) assert.equal(all[i * CHUNK], i, `chunk ${i} in its place`);
});
