/**
 * Answers after their audit lines (src/audit/audit-barrier.ts), against a real server (local
 * backend) whose `--audit-log` is a named pipe nobody reads yet: once the pipe is full, the
 * server cannot write its lines, and neither a JSON-RPC reply nor an HTTP answer leaves before
 * the lines recorded before it. Once the pipe is read, every answer arrives, each line once.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { sleep, startServer, TestSession } from '../support/harness.ts';

const STARTS = 8;

test('replies and HTTP answers wait for the audit lines recorded before them', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'audit-barrier-'));
  const pipe = join(dir, 'audit.pipe');
  assert.equal(spawnSync('mkfifo', [pipe]).status, 0, 'mkfifo');
  const server = await startServer({ flags: ['--audit-log', pipe] });
  let reader: ChildProcess | undefined;
  let read = '';
  const readPipe = (): void => {
    reader ??= spawn('cat', [pipe], { stdio: ['ignore', 'pipe', 'inherit'] });
    reader.stdout?.setEncoding('utf8').on('data', (s: string) => {
      read += s;
    });
  };
  t.after(async () => {
    readPipe();
    await server.close();
    reader?.kill();
    await rm(dir, { recursive: true, force: true });
  });
  const s = await TestSession.open(server.url);
  t.after(() => s.close());

  // A pipe holds 64 KiB: each start's line carries a 16 KiB argument, so the pipe fills.
  const big = 'x'.repeat(16 * 1024);
  const answered = new Set<string>();
  const starts = Array.from({ length: STARTS }, (_, i) =>
    s.request('process/start', { processId: `p${i}`, argv: ['true', big] }).then(() => answered.add(`p${i}`)),
  );
  let httpAnswered = false;
  await sleep(500);
  const info = fetch(`${server.httpUrl}/v1/sessions/${s.sessionId}`).then(async (r) => {
    httpAnswered = true;
    return { status: r.status, body: await r.text() };
  });
  await sleep(1500);
  assert.ok(answered.size < STARTS, `all ${STARTS} starts were answered while their audit lines could not be written`);
  assert.equal(httpAnswered, false, 'an HTTP answer left before the audit lines recorded before it');

  readPipe();
  await Promise.all(starts);
  const answer = await info;
  assert.equal(answer.status, 200, answer.body);
  for (const end = Date.now() + 10_000; Date.now() < end; await sleep(50)) {
    if ([...answered].every((id) => read.includes(`"processId":"${id}"`))) break;
  }
  const lines = read
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as { action: string; detail: { processId?: string } });
  for (let i = 0; i < STARTS; i++)
    assert.equal(
      lines.filter((l) => l.action === 'process.start' && l.detail.processId === `p${i}`).length,
      1,
      `p${i} started once in the log`,
    );
});
