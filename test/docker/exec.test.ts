/**
 * Exec in the three modes against a real engine: output, stdin, PTY size, exit codes, signals,
 * on both paths of a session: the exec agent and one engine exec per command.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { BackendSession } from '../../src/backends/types.ts';
import type { ExecServerError } from '../../src/errors.ts';
import { dockerTestOptions } from './engine.ts';
import { RecordingSink, sharedSession, sleep, spawnRequest } from './helpers.ts';

for (const execPath of ['agent', 'exec'] as const) {
  describe(`exec path ${execPath}`, () => {
    const shared = sharedSession({ execPath });

    test('pipe without stdin: stdout and stderr labelled, exit code', dockerTestOptions, async () => {
      const sink = new RecordingSink();
      const started = Date.now();
      await shared.session.spawn(spawnRequest(['sh', '-c', 'echo out; echo err >&2; exit 3']), sink);
      const exit = await sink.exited;
      const ms = Date.now() - started;
      assert.deepEqual(exit, { kind: 'exited', code: 3 });
      assert.equal(sink.text('stdout'), 'out\n');
      assert.equal(sink.text('stderr'), 'err\n');
      assert.deepEqual(sink.violations, []);
      console.log(`# exec round trip (spawn to exit): ${ms} ms`);
    });

    test('env, cwd and arg0 are honoured', dockerTestOptions, async () => {
      const sink = new RecordingSink();
      await shared.session.spawn(
        spawnRequest(['/bin/bash', '-c', 'echo "$FOO $(pwd) $0"'], {
          env: { FOO: 'bar', PATH: '/bin' },
          cwd: '/tmp',
          arg0: 'myname',
        }),
        sink,
      );
      assert.deepEqual(await sink.exited, { kind: 'exited', code: 0 });
      assert.equal(sink.text(), 'bar /tmp myname\n');
    });

    test('missing cwd and missing command fail the spawn, with no process', dockerTestOptions, async () => {
      await assert.rejects(
        shared.session.spawn(spawnRequest(['true'], { cwd: '/nope' }), new RecordingSink()),
        (err: ExecServerError) =>
          err.code === 'EXEC_ERR_SPAWN_FAILED' && err.message === 'cwd /nope: No such file or directory',
      );
      await assert.rejects(
        shared.session.spawn(spawnRequest(['no-such-command']), new RecordingSink()),
        (err: ExecServerError) =>
          err.code === 'EXEC_ERR_SPAWN_FAILED' && err.message === 'no-such-command: No such file or directory',
      );
    });

    test('pipe with stdin: write, close stdin, the rest of the output still arrives', dockerTestOptions, async () => {
      const sink = new RecordingSink();
      const proc = await shared.session.spawn(
        spawnRequest(['sh', '-c', 'cat; echo done; sleep 0.2; echo after'], { mode: 'pipe' }),
        sink,
      );
      await proc.write(Buffer.from('hello\n'));
      await proc.write(Buffer.from('world\n'));
      await proc.closeStdin();
      assert.deepEqual(await sink.exited, { kind: 'exited', code: 0 });
      assert.equal(sink.text('stdout'), 'hello\nworld\ndone\nafter\n');
      // After exit every method is a no-op.
      await proc.write(Buffer.from('x'));
      await proc.closeStdin();
      await proc.resize({ cols: 10, rows: 10 });
      await proc.signal('SIGTERM');
    });

    test('PTY: a resize right after the start wins over the size the start asked for', dockerTestOptions, async () => {
      for (let i = 0; i < 3; i++) {
        const sink = new RecordingSink();
        const proc = await shared.session.spawn(
          spawnRequest(['sh', '-c', 'read x; stty size'], { mode: 'pty', size: { cols: 100, rows: 30 } }),
          sink,
        );
        // The start's own resize may still be retrying (the engine refuses one for an exec it has not
        // registered yet); it must not land after this one.
        await proc.resize({ cols: 132, rows: 43 });
        await proc.write(Buffer.from('go\r'));
        assert.deepEqual(await sink.exited, { kind: 'exited', code: 0 });
        assert.match(sink.text(), /43 132/, `run ${i}`);
      }
    });

    test('PTY: initial size, resize, stty sees it', dockerTestOptions, async () => {
      const sink = new RecordingSink();
      const proc = await shared.session.spawn(
        spawnRequest(['sh', '-c', 'stty size; read x; stty size'], { mode: 'pty', size: { cols: 100, rows: 30 } }),
        sink,
      );
      await waitFor(() => sink.text().includes('30 100'));
      await proc.resize({ cols: 132, rows: 43 });
      await proc.write(Buffer.from('go\r'));
      assert.deepEqual(await sink.exited, { kind: 'exited', code: 0 });
      assert.match(sink.text(), /30 100[\s\S]*43 132/);
      assert.ok(sink.chunks.every((c) => c.stream === 'pty'));
    });

    test('PTY: 64 KiB of output delivered completely', dockerTestOptions, async () => {
      const sink = new RecordingSink();
      // 1024 lines of 63 chars + \n = 64 KiB; the tty turns \n into \r\n.
      await shared.session.spawn(
        spawnRequest(['sh', '-c', 'i=0; while [ $i -lt 1024 ]; do printf "%063d\\n" $i; i=$((i+1)); done'], {
          mode: 'pty',
        }),
        sink,
      );
      assert.deepEqual(await sink.exited, { kind: 'exited', code: 0 });
      const text = sink.text().replace(/\r\n/g, '\n');
      assert.equal(text.length, 64 * 1024);
      assert.ok(text.endsWith(`${'1023'.padStart(63, '0')}\n`));
    });

    // gVisor's own terminals (the agent makes the PTY inside the sandbox) do not act on the EOF
    // character in this runsc release; docs/docker-backend.md, "Under gVisor".
    const eofOptions =
      execPath === 'agent' && process.env.EXEC_SERVER_TEST_RUNTIME === 'runsc'
        ? { ...dockerTestOptions, skip: "gVisor's agent-made PTY ignores the EOF character (documented)" }
        : dockerTestOptions;

    test('PTY: closeStdin sends EOF', eofOptions, async () => {
      const sink = new RecordingSink();
      const proc = await shared.session.spawn(
        spawnRequest(['sh', '-c', 'cat >/dev/null; echo eof'], { mode: 'pty' }),
        sink,
      );
      await proc.closeStdin();
      assert.deepEqual(await sink.exited, { kind: 'exited', code: 0 });
      assert.match(sink.text(), /eof/);
    });

    test('signal reaches the whole process group; signaled exit reported', dockerTestOptions, async () => {
      const sink = new RecordingSink();
      const proc = await shared.session.spawn(
        spawnRequest(['sh', '-c', 'sleep 300 & sleep 301 & echo started; wait']),
        sink,
      );
      await waitFor(() => sink.text().includes('started'));
      await proc.signal('SIGTERM');
      const exit = await sink.exited;
      assert.deepEqual(exit, { kind: 'signaled', signal: 'SIGTERM', signo: 15 });
      assert.equal(await countProcs(shared.session, 'sleep 30'), 0);
    });

    test('SIGKILL of a group whose children ignore SIGTERM leaves nothing alive', dockerTestOptions, async () => {
      const sink = new RecordingSink();
      const proc = await shared.session.spawn(
        spawnRequest(
          ['sh', '-c', 'trap "" TERM; (trap "" TERM; sleep 400) & (trap "" TERM; sleep 401) & echo started; wait'],
          { mode: 'pty' },
        ),
        sink,
      );
      await waitFor(() => sink.text().includes('started'));
      await proc.signal('SIGTERM');
      await sleep(300);
      assert.ok((await countProcs(shared.session, 'sleep 40')) >= 2, 'TERM was ignored');
      await proc.signal('SIGKILL');
      const exit = await sink.exited;
      assert.deepEqual(exit, { kind: 'signaled', signal: 'SIGKILL', signo: 9 });
      assert.equal(await countProcs(shared.session, 'sleep 40'), 0);
    });

    test('SIGINT on a pipe process without stdin', dockerTestOptions, async () => {
      const sink = new RecordingSink();
      const proc = await shared.session.spawn(spawnRequest(['sleep', '300']), sink);
      await sleep(100);
      await proc.signal('SIGINT');
      assert.deepEqual(await sink.exited, { kind: 'signaled', signal: 'SIGINT', signo: 2 });
    });
  });
}

/** Number of processes whose command line contains `pattern`, seen with `ps` inside the container. */
export async function countProcs(s: BackendSession, pattern: string): Promise<number> {
  const sink = new RecordingSink();
  await s.spawn(spawnRequest(['ps', '-o', 'pid,pgid,args']), sink);
  await sink.exited;
  return sink
    .text()
    .split('\n')
    .filter((l) => l.includes(pattern) && !l.includes('ps -o')).length;
}

async function waitFor(cond: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await sleep(10);
  }
}
