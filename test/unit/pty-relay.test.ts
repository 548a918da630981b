/**
 * The local backend's PTY processes through build/pty-relay, driven directly (no server): the
 * tail of a fast exit, backpressure across the exit, start errors, resize, signals, background
 * holders of the terminal, and a relay that dies.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { spawnPty } from '../../src/backends/local/pty-process.ts';
import type { BackendExit, BackendProcess } from '../../src/backends/types.ts';

interface Run {
  readonly proc: BackendProcess;
  readonly ended: Promise<BackendExit>;
  text(): string;
}

async function run(script: string, size = { cols: 80, rows: 24 }): Promise<Run> {
  const chunks: Buffer[] = [];
  let exit!: (e: BackendExit) => void;
  const ended = new Promise<BackendExit>((resolve) => (exit = resolve));
  const proc = await spawnPty(
    {
      file: 'sh',
      args: ['-c', script],
      cwd: tmpdir(),
      env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin' },
      size,
      sandboxType: 'none',
    },
    { output: (_stream, data) => chunks.push(Buffer.from(data)), exit }, // a sink copies what it keeps (ProcessSink)
  );
  return { proc, ended, text: () => Buffer.concat(chunks).toString('utf8') };
}

test('a fast-exiting command delivers its whole output, then the exit', async () => {
  for (let i = 0; i < 20; i++) {
    const r = await run('head -c 65536 /dev/zero | tr "\\0" a; exit 7');
    assert.deepEqual(await r.ended, { kind: 'exited', code: 7 });
    assert.equal(r.text(), 'a'.repeat(65536), `run ${i}`);
  }
});

test('output paused across the exit is delivered whole once resumed', async () => {
  for (let i = 0; i < 5; i++) {
    const r = await run('head -c 3000 /dev/zero | tr "\\0" b');
    r.proc.pauseOutput();
    await sleep(150); // the command is long gone; its output waits in the relay and the socket
    r.proc.resumeOutput();
    assert.deepEqual(await r.ended, { kind: 'exited', code: 0 });
    assert.equal(r.text(), 'b'.repeat(3000), `run ${i}`);
  }
});

const ownCpus = /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '?';

/** Streams 24 MiB of zeros, then prints the shell's CPU list right away and after 0.5 s of quiet. */
async function cpusDuringAndAfterStream(
  pinning?: boolean,
): Promise<{ during?: string | undefined; after?: string | undefined }> {
  // The first list is read while the stream's pin holds (the shell forks after it), the second
  // after a quiet spell longer than the relay's 100 ms.
  const script =
    'head -c 25165824 /dev/zero; grep Cpus_allowed_list /proc/self/status; sleep 0.5; grep Cpus_allowed_list /proc/self/status';
  let text = '';
  let zeros = 0;
  let exit!: (e: BackendExit) => void;
  const ended = new Promise<BackendExit>((resolve) => (exit = resolve));
  await spawnPty(
    {
      file: 'sh',
      args: ['-c', script],
      cwd: tmpdir(),
      env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin' },
      size: { cols: 80, rows: 24 },
      sandboxType: 'none',
      pinning,
    },
    {
      output: (_stream, data) => {
        const firstText = data.findIndex((b) => b !== 0);
        zeros += firstText < 0 ? data.length : firstText;
        if (firstText >= 0) text += data.subarray(firstText).toString('utf8');
      },
      exit,
    },
  );
  assert.deepEqual(await ended, { kind: 'exited', code: 0 });
  assert.equal(zeros, 25165824, 'every byte arrives');
  const [during, after] = [...text.matchAll(/Cpus_allowed_list:\s*(\S+)/g)].map((m) => m[1]);
  return { during, after };
}

test('a command streaming fast is pinned with the relay to one CPU, and gets its CPUs back once quiet', async () => {
  const single = /^\d+$/.test(ownCpus);
  let pinnedSeen = false;
  // A stream is fast only with a CPU to run on: on a machine busy with other tests, a stream
  // may stay under the relay's pace for a while, so attempts go on for up to 20 s (three at least).
  const until = Date.now() + 20_000;
  for (let attempt = 0; !pinnedSeen && (attempt < 3 || Date.now() < until); attempt++) {
    const { during, after } = await cpusDuringAndAfterStream();
    assert.equal(after, ownCpus, 'once quiet, the command has the CPUs the relay started with');
    if (single) assert.equal(during, ownCpus, 'with one CPU there is nothing to pin');
    else assert.ok(during === ownCpus || /^\d+$/.test(during ?? ''), `pinned to one CPU or not at all: ${during}`);
    pinnedSeen = single || during !== ownCpus;
  }
  assert.ok(pinnedSeen, 'a 24 MiB stream was pinned in one of the attempts of 20 s');
});

test('with pinning off (the default; --pty-pin turns it on), a command streaming fast keeps its CPUs', async () => {
  const { during, after } = await cpusDuringAndAfterStream(false);
  assert.equal(during, ownCpus);
  assert.equal(after, ownCpus);
});

test('a command that cannot be started is a clear error, not a terminal message', async () => {
  await assert.rejects(
    spawnPty(
      {
        file: 'no-such-command-here',
        args: [],
        cwd: tmpdir(),
        env: { PATH: '/usr/bin:/bin' },
        size: { cols: 80, rows: 24 },
        sandboxType: 'none',
      },
      { output: () => undefined, exit: () => undefined },
    ),
    (err: Error & { code?: string }) =>
      err.code === 'EXEC_ERR_SPAWN_FAILED' && err.message === 'no-such-command-here: No such file or directory',
  );
});

test('the terminal has the requested size, a resize reaches it, keystrokes and Ctrl-D work', async () => {
  const r = await run('stty size; read line; stty size; echo "got $line"; cat; echo "cat ended"', {
    cols: 132,
    rows: 43,
  });
  while (!r.text().includes('43 132')) await sleep(10);
  await r.proc.resize({ cols: 90, rows: 30 });
  await sleep(50);
  await r.proc.write(Buffer.from('hello\n'));
  await sleep(50);
  await r.proc.closeStdin();
  assert.deepEqual(await r.ended, { kind: 'exited', code: 0 });
  const text = r.text().replace(/\r\n/g, '\n');
  assert.match(text, /^43 132\n/);
  assert.match(text, /\n30 90\ngot hello\n/);
  assert.match(text, /cat ended\n$/);
});

test('a signal reaches the command and is reported as the way it ended', async () => {
  const r = await run('echo ready; sleep 30');
  while (!r.text().includes('ready')) await sleep(10);
  await r.proc.signal('SIGTERM');
  assert.deepEqual(await r.ended, { kind: 'signaled', signal: 'SIGTERM', signo: 15 });
});

test('a background process that keeps the terminal open does not hold the exit back for long', async () => {
  const started = performance.now();
  // In a session of its own, the hangup when the shell exits does not reach it: the terminal
  // never reads EIO while it lives. The shell waits until it is in that session (the marker
  // file is written after setsid), or the hangup could still catch it.
  const marker = join(tmpdir(), `pty-relay-bg-${process.pid}-${Date.now()}`);
  const r = await run(
    `setsid -f sh -c 'touch ${marker}; exec sleep 8'; while [ ! -e ${marker} ]; do sleep 0.01; done; rm -f ${marker}; echo foreground done`,
  );
  assert.deepEqual(await r.ended, { kind: 'exited', code: 0 });
  assert.match(r.text(), /foreground done/);
  const took = performance.now() - started;
  assert.ok(took >= 150 && took < 5_000, `the exit came after ${took.toFixed(0)} ms (quiet time 200 ms)`);
});

test('a relay that dies is reported as lost, not as an exit of the command', async () => {
  const r = await run('echo "relay $PPID"; sleep 30');
  let relay: number | undefined;
  while (relay === undefined) {
    relay = Number(/relay (\d+)/.exec(r.text())?.[1]) || undefined;
    await sleep(10);
  }
  process.kill(relay, 'SIGKILL');
  const exit = await r.ended;
  assert.equal(exit.kind, 'lost');
  assert.match((exit as { reason: string }).reason, /PTY helper ended without reporting the exit: killed by SIGKILL/);
});
