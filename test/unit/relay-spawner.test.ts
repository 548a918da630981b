/**
 * A local session's relay spawner (build/relay-spawner) driven through spawnPipe, no server: the
 * command's output, stdin and exit, its process group and session of its own, a start that
 * cannot happen, the relay's exit as the spawner reaps it, and a command that is done before
 * the server has read its reply and sockets.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import { spawnPipe } from '../../src/backends/local/pipe-process.ts';
import { RelaySpawner } from '../../src/backends/local/relay-spawner.ts';
import { Keepers } from '../../src/backends/local/keepers.ts';
import type { BackendExit } from '../../src/backends/types.ts';

const env = { PATH: process.env['PATH'] ?? '/usr/bin:/bin' };

/** Keeps the event loop busy for `ms`, as a loaded server's would be. */
function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

/** `blockMs`: the loop is busy that long right after the request went out (the command runs meanwhile). */
async function run(spawner: RelaySpawner, script: string, stdin?: string, blockMs = 0) {
  const out: Record<string, string> = { stdout: '', stderr: '' };
  let exit!: (e: BackendExit) => void;
  const ended = new Promise<BackendExit>((resolve) => (exit = resolve));
  const keepers = new Keepers();
  const spawning = spawnPipe(
    {
      file: 'sh',
      args: ['-c', script],
      cwd: tmpdir(),
      env,
      sandboxType: 'none',
      stdin: stdin !== undefined,
      spawner,
      keepers,
    },
    { output: (stream, data) => (out[stream] += data.toString('utf8')), exit },
  );
  busy(blockMs);
  const proc = await spawning;
  const started = performance.now();
  if (stdin !== undefined) {
    await proc.write(Buffer.from(stdin));
    await proc.closeStdin();
  }
  const result = await ended;
  return { exit: result, out, proc, keepers, afterStart: performance.now() - started };
}

test('commands start from the spawner with their stdio, stdin and exit', async () => {
  const spawner = await RelaySpawner.start();
  assert.ok(spawner, 'build/relay-spawner is built (sh scripts/build-native.sh)');
  try {
    const a = await run(spawner, 'echo out; echo err >&2; exit 3');
    assert.deepEqual(a.exit, { kind: 'exited', code: 3 });
    assert.equal(a.out['stdout'], 'out\n');
    assert.equal(a.out['stderr'], 'err\n');
    const b = await run(spawner, 'tr a-z A-Z', 'hello');
    assert.equal(b.out['stdout'], 'HELLO');
    // A session and process group of its own, as a detached spawn gives: the command leads neither
    // (the relay does), but its group is not the server's.
    const c = await run(spawner, 'ps -o pgid= -p $$ 2>/dev/null || cut -d" " -f5 /proc/$$/stat');
    assert.notEqual(Number(c.out['stdout']?.trim()), process.pid);
    const killed = await run(spawner, 'kill -TERM $$');
    assert.equal(killed.exit.kind, 'signaled');
    // Many in a row: every one is reported, none waits for the pipe grace.
    const t = performance.now();
    for (let i = 0; i < 20; i++) assert.deepEqual((await run(spawner, 'true')).exit, { kind: 'exited', code: 0 });
    assert.ok(performance.now() - t < 20 * 200, 'no command waited for the 250 ms pipe grace');
  } finally {
    await spawner.close();
  }
});

test('a command done before its reply and sockets are read still ends at once', async () => {
  const spawner = await RelaySpawner.start();
  assert.ok(spawner);
  try {
    // Node emits `end` on a paused socket that reads its end with nothing buffered: an empty
    // stdout that ended before spawnPipe listened waited for the 250 ms pipe grace, past the
    // early-exit window of a sandboxed attempt (its denial then went unclassified).
    for (let i = 0; i < 5; i++) {
      const r = await run(spawner, 'echo denied >&2; exit 2', undefined, 60);
      assert.deepEqual(r.exit, { kind: 'exited', code: 2 });
      assert.equal(r.out['stderr'], 'denied\n');
      assert.equal(r.out['stdout'], '');
      assert.ok(r.afterStart < 150, `exit ${r.afterStart.toFixed(1)} ms after the start: the pipe grace`);
    }
  } finally {
    await spawner.close();
  }
});

test('a start that cannot happen is an error, and a closed spawner is not used', async () => {
  const spawner = await RelaySpawner.start();
  assert.ok(spawner);
  await assert.rejects(
    spawner.spawn('/bin/true', [], { cwd: '/nonexistent-dir-for-the-test', env, stdin: false }),
    (err: NodeJS.ErrnoException) => err.code === 'ENOENT',
  );
  await spawner.close();
  for (let i = 0; i < 50 && spawner.alive; i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(spawner.alive, false);
});
