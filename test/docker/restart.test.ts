/**
 * Processes that survive the server: a real server process is SIGKILLed while a command streams
 * and another sleeps; a new one with the same instance id re-adopts the session, and a client
 * that resumes reads every byte it had not read, once and in order, with seqs continuing and the
 * real exit codes (docs/docker-backend.md, "Processes that survive the server").
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { sleep, TestSession } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

async function serve(instanceId: string): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      'src/main.ts',
      'serve',
      '--backend',
      'docker',
      '--image',
      TEST_IMAGE,
      '--instance-id',
      instanceId,
      '--listen',
      `ws://127.0.0.1:${port}`,
      '--log-level',
      'warn',
    ],
    { stdio: ['ignore', 'ignore', 'inherit'], cwd: new URL('../..', import.meta.url).pathname },
  );
  // Generous: on a loaded CI machine a server's boot (tsx, recovery of its containers) is slow.
  for (let i = 0; i < 1200; i++) {
    if (
      await fetch(`http://127.0.0.1:${port}/readyz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return { url: `ws://127.0.0.1:${port}`, child };
    await sleep(100);
  }
  child.kill('SIGKILL');
  throw new Error('server did not become ready');
}

interface Seen {
  text: string;
  lastSeq: number;
  seqs: number[];
}

function follow(s: TestSession, processId: string): Seen {
  const seen: Seen = { text: '', lastSeq: 0, seqs: [] };
  s.conn.onNotification((n) => {
    if (n.params['processId'] !== processId) return;
    const seq = n.params['seq'] as number;
    seen.seqs.push(seq);
    seen.lastSeq = seq;
    if (n.method === 'process/output') seen.text += Buffer.from(String(n.params['chunk']), 'base64').toString('utf8');
  });
  return seen;
}

/** Reads from `afterSeq` until the process is closed; returns the output and what ended it. */
async function readRest(
  s: TestSession,
  processId: string,
  afterSeq: number,
): Promise<{ text: string; seqs: number[]; exitCode: unknown }> {
  let text = '';
  const seqs: number[] = [];
  let after = afterSeq;
  for (let i = 0; i < 600; i++) {
    const r = await s.request<{
      chunks: Array<{ seq: number; chunk: string }>;
      nextSeq: number;
      exited: boolean;
      exitCode: unknown;
      closed: boolean;
    }>('process/read', { processId, afterSeq: after, waitMs: 1000 });
    for (const c of r.chunks) {
      seqs.push(c.seq);
      text += Buffer.from(c.chunk, 'base64').toString('utf8');
    }
    after = Math.max(after, r.nextSeq - 1);
    if (r.exited && r.closed) return { text, seqs, exitCode: r.exitCode };
  }
  throw new Error(`process ${processId} did not end`);
}

test('SIGKILL the server mid-stream and mid-sleep, restart it: every byte once, seqs continue, real exit codes', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 300_000,
}, async (t) => {
  const instanceId = `restart-${process.pid}-${Date.now()}`;
  const first = await serve(instanceId);
  let second: { url: string; child: ChildProcess } | undefined;
  t.after(async () => {
    first.child.kill('SIGKILL');
    if (second) {
      const gone = new Promise((r) => second!.child.once('exit', r));
      second.child.kill('SIGTERM');
      await gone;
    }
  });
  const s = await TestSession.open(first.url, { session: { sandbox: { type: 'danger-full-access' } } });
  const streaming = follow(s, 'stream');
  const sleeping = follow(s, 'nap');
  await s.request('process/start', {
    processId: 'stream',
    argv: ['sh', '-c', 'i=0; while [ $i -lt 400 ]; do echo line-$i; i=$((i+1)); sleep 0.01; done; exit 5'],
  });
  await s.request('process/start', {
    processId: 'nap',
    argv: ['sh', '-c', 'echo napping; sleep 3; echo woke; exit 9'],
  });
  while (!streaming.text.includes('line-50\n') || !sleeping.text.includes('napping')) await sleep(20);

  first.child.kill('SIGKILL');
  await new Promise((r) => first.child.once('exit', r));
  const before = { stream: { ...streaming }, nap: { ...sleeping } };
  second = await serve(instanceId);
  const again = await TestSession.open(second.url, { resumeSessionId: s.sessionId });
  t.after(() => again.close());

  const listed = await again.request<{ processes: Array<Record<string, unknown>> }>('process/list', {});
  assert.deepEqual(
    listed.processes.map((p) => p['processId']).sort(),
    ['nap', 'stream'],
    'both processes are known to the new server',
  );

  const stream = await readRest(again, 'stream', before.stream.lastSeq);
  const expected = Array.from({ length: 400 }, (_, i) => `line-${i}\n`).join('');
  assert.equal(before.stream.text + stream.text, expected, 'every byte once, in order');
  assert.equal(stream.exitCode, 5);
  assert.equal(stream.seqs[0], before.stream.lastSeq + 1, 'seqs continue where the client left off');
  assert.deepEqual(
    stream.seqs,
    stream.seqs.map((_, i) => before.stream.lastSeq + 1 + i),
  );

  const nap = await readRest(again, 'nap', before.nap.lastSeq);
  assert.equal(before.nap.text + nap.text, 'napping\nwoke\n');
  assert.equal(nap.exitCode, 9);
  // The new server reached the surviving agent by its socket, as the first did (docs/docker-backend.md).
  const info = await again.request<{ agentTransport?: string }>('session/info', {});
  assert.equal(info.agentTransport, 'socket');
});
