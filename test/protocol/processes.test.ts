/**
 * Process methods and notifications on both backends, over a real WebSocket. The limits (retention,
 * pruning, slow and stalled clients, flow control) on a server of their own each are in
 * process-limits.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { RpcError } from '../../src/client/rpc-connection.ts';
import { BACKENDS } from '../support/backends.ts';
import { b64, sleep, startServer, type TestServer, TestSession, unb64 } from '../support/harness.ts';

for (const backend of BACKENDS) {
  describe(`processes [${backend}]`, { timeout: 300_000 }, () => {
    let server: TestServer;
    let s: TestSession;
    const fresh = async (): Promise<TestSession> =>
      TestSession.open(server.url, { session: { sandbox: { type: 'danger-full-access' } } });

    test('setup', async () => {
      server = await startServer({ backend });
      s = await fresh();
    });

    test('pipe: stdout and stderr separated; seq numbers 1.. across output, exit and close', async () => {
      const r = await s.run('sep', ['sh', '-c', 'echo out; echo err >&2; exit 3']);
      assert.equal(r.stdout, 'out\n');
      assert.equal(r.stderr, 'err\n');
      assert.equal(r.exited['exitCode'], 3);
      assert.equal(r.exited['terminal'], 'exited');
      const seqs = r.events.map((e) => e.params['seq'] as number);
      assert.deepEqual(
        seqs,
        seqs.map((_, i) => i + 1),
      );
      assert.equal(r.events.at(-1)?.method, 'process/closed');
      const dup = s.start('sep', ['true']);
      await assert.rejects(
        dup,
        (e: RpcError) => e.code === 'EXEC_ERR_PROCESS_EXISTS' && /already exists/.test(e.message),
      );
    });

    test('pipe with stdin: cat echoes writes; closeStdin ends it; writeId dedupes a retried write', async () => {
      await s.start('cat', ['cat'], { pipeStdin: true });
      assert.deepEqual(await s.request('process/write', { processId: 'cat', chunk: b64('one\n'), writeId: 'w1' }), {
        status: 'accepted',
      });
      assert.deepEqual(await s.request('process/write', { processId: 'cat', chunk: b64('one\n'), writeId: 'w1' }), {
        status: 'accepted',
      });
      await s.request('process/write', { processId: 'cat', chunk: b64('two\n'), writeId: 'w2' });
      await s.request('process/closeStdin', { processId: 'cat' });
      const r = await s.result('cat');
      assert.equal(r.stdout, 'one\ntwo\n');
      assert.equal(r.exited['exitCode'], 0);
      assert.deepEqual(await s.request('process/write', { processId: 'cat', chunk: b64('late') }), {
        status: 'stdinClosed',
      });
      assert.deepEqual(await s.request('process/write', { processId: 'nope', chunk: b64('x') }), {
        status: 'unknownProcess',
      });
      await assert.rejects(
        s.request('process/write', { processId: 'cat', chunk: '***' }),
        (e: RpcError) => e.rpcCode === -32602 && /chunk/.test(e.message),
      );
    });

    test('pipe: a command opens /dev/stdout, /dev/stderr and /dev/stdin by name, sandboxed or not', async () => {
      // A socket as stdio would refuse these opens (ENXIO): `echo x > /dev/stderr` must work as in a terminal.
      const script = 'echo out > /dev/stdout; echo err > /dev/stderr; cat /dev/stdin; echo ok | tee /dev/stderr';
      const sandboxed = await TestSession.open(server.url, { session: { sandbox: { type: 'workspace-write' } } });
      for (const [name, session] of [
        ['none', s],
        ['sandboxed', sandboxed],
      ] as const) {
        await session.start(`devs-${name}`, ['sh', '-c', script], { pipeStdin: true });
        await session.request('process/write', { processId: `devs-${name}`, chunk: b64('in\n') });
        await session.request('process/closeStdin', { processId: `devs-${name}` });
        const r = await session.result(`devs-${name}`);
        assert.equal(r.stdout, 'out\nin\nok\n', `${name}: ${r.stderr}`);
        assert.equal(r.stderr, 'err\nok\n', name);
        assert.equal(r.exited['exitCode'], 0, name);
      }
      await sandboxed.close();
    });

    test("pipe and PTY: commands get the umask a docker exec or the server's shell would give", async () => {
      // docker: the engine's 022 (the agent keeps 077 for its own files only); local: the server's.
      const want = backend === 'docker' ? '0022' : process.umask().toString(8).padStart(4, '0');
      const r = await s.run('umask', ['sh', '-c', 'umask']);
      assert.equal(r.stdout.trim(), want);
      const t = await s.run('umask-pty', ['sh', '-c', 'umask'], { tty: true });
      assert.equal(t.pty.trim(), want);
    });

    test('pipe without stdin: writes answer stdinClosed, exactly \\u0003 interrupts', async () => {
      await s.start('nostdin', ['sh', '-c', 'echo ready; exec sleep 30']);
      await s.waitFor((all) => all.some((n) => n.params['processId'] === 'nostdin' && n.method === 'process/output'));
      assert.deepEqual(await s.request('process/write', { processId: 'nostdin', chunk: b64('hello') }), {
        status: 'stdinClosed',
      });
      assert.deepEqual(await s.request('process/write', { processId: 'nostdin', chunk: b64('\u0003') }), {
        status: 'accepted',
      });
      const r = await s.result('nostdin');
      assert.equal(r.exited['terminal'], 'signaled');
      assert.equal(r.exited['signal'], 'SIGINT');
      assert.equal(r.exited['exitCode'], 130);
    });

    test('PTY: interactive sh driven by writes, stty size after resize, exit code of exit N', async () => {
      await s.start('tty', ['sh', '-i'], { tty: true, size: { cols: 90, rows: 30 }, env: { PS1: '$ ', TERM: 'dumb' } });
      await s.request('process/write', { processId: 'tty', chunk: b64('stty size\n') });
      await s.waitFor(() => unb64All(s, 'tty').includes('30 90'), 10_000, 'initial size');
      await s.request('process/resize', { processId: 'tty', cols: 100, rows: 40 });
      await s.request('process/write', { processId: 'tty', chunk: b64('stty size; echo mark-$((6*7))\n') });
      await s.waitFor(
        () => unb64All(s, 'tty').includes('40 100') && unb64All(s, 'tty').includes('mark-42'),
        10_000,
        'resized size',
      );
      await s.request('process/write', { processId: 'tty', chunk: b64('exit 7\n') });
      const r = await s.result('tty');
      assert.equal(r.exited['exitCode'], 7);
      assert.ok(r.events.filter((e) => e.method === 'process/output').every((e) => e.params['stream'] === 'pty'));
      await assert.rejects(s.request('process/resize', { processId: 'sep', cols: 10, rows: 10 }), (e: RpcError) =>
        /no terminal/.test(e.message),
      );
    });

    test('PTY: 64 KiB printed by a fast-exiting program arrives whole, 50 times out of 50', async () => {
      for (let i = 0; i < 50; i++) {
        const r = await s.run(`burst-${i}`, ['sh', '-c', 'head -c 65536 /dev/zero | tr "\\0" a'], { tty: true });
        assert.equal(r.pty.length, 65536, `run ${i} delivered ${r.pty.length} bytes`);
        assert.equal(r.exited['exitCode'], 0);
      }
    });

    test('signals reach grandchildren: terminate leaves no sleep of the group behind', async () => {
      const marker = 4000 + Math.floor(Math.random() * 999); // never 3600, the container keepalive's sleep
      await s.start('group', ['sh', '-c', `sleep ${marker} & sleep ${marker} & wait`]);
      await sleep(300);
      assert.deepEqual(await s.request('process/terminate', { processId: 'group' }), { running: true });
      const r = await s.result('group');
      assert.equal(r.exited['terminal'], 'terminated');
      assert.equal(r.exited['exitCode'], 143);
      await sleep(200);
      const ps = await s.run(`ps-${marker}`, ['sh', '-c', 'ps -eo args 2>/dev/null || ps']);
      assert.ok(!ps.stdout.split('\n').some((l) => l.trim() === `sleep ${marker}`), `left behind: ${ps.stdout}`);
      assert.deepEqual(await s.request('process/terminate', { processId: 'group' }), { running: false });
    });

    test('process/signal: SIGTERM gives signaled 143; unknown signal names are rejected', async () => {
      await s.start('sig', ['sleep', '30']);
      await s.request('process/signal', { processId: 'sig', signal: 'SIGTERM' });
      const r = await s.result('sig');
      assert.equal(r.exited['terminal'], 'signaled');
      assert.equal(r.exited['exitCode'], 143);
      await assert.rejects(
        s.request('process/signal', { processId: 'sig', signal: 'SIGBOGUS' }),
        (e: RpcError) => e.rpcCode === -32602,
      );
      await assert.rejects(
        s.request('process/signal', { processId: 'ghost', signal: 'interrupt' }),
        (e: RpcError) => e.code === 'EXEC_ERR_PROCESS_NOT_FOUND',
      );
    });

    test('terminate escalates to SIGKILL after the grace for a process ignoring SIGTERM', async () => {
      await s.start('stubborn', ['sh', '-c', 'trap "" TERM; echo armed; while :; do sleep 1; done']);
      await s.waitFor(() => s.eventsOf('stubborn').some((e) => e.method === 'process/output'));
      await s.request('process/terminate', { processId: 'stubborn' });
      const r = await s.result('stubborn', 10_000);
      assert.equal(r.exited['terminal'], 'terminated');
      assert.equal(r.exited['exitCode'], 137);
    });

    test('timeoutMs ends the process as timed-out with exit code 124', async () => {
      const r = await s.run('slow', ['sleep', '30'], { timeoutMs: 300 });
      assert.equal(r.exited['terminal'], 'timed-out');
      assert.equal(r.exited['exitCode'], 124);
    });

    test('process/read long-polls and reports exit, close and seq bookkeeping', async () => {
      await s.start('poll', ['sh', '-c', 'sleep 0.4; echo late']);
      const t0 = Date.now();
      const first = await s.request<Record<string, unknown>>('process/read', {
        processId: 'poll',
        afterSeq: 0,
        waitMs: 5000,
      });
      assert.ok(Date.now() - t0 >= 200, 'read returned before output existed');
      const chunks = first['chunks'] as Array<Record<string, unknown>>;
      assert.equal(unb64(chunks[0]?.['chunk']), 'late\n');
      await s.result('poll');
      const all = await s.request<Record<string, unknown>>('process/read', { processId: 'poll', afterSeq: 0 });
      assert.equal(all['exited'], true);
      assert.equal(all['closed'], true);
      assert.equal(all['exitCode'], 0);
      assert.equal(all['sandboxDenied'], false);
      assert.equal(all['nextSeq'], 4);
      const empty = await s.request<Record<string, unknown>>('process/read', {
        processId: 'poll',
        afterSeq: 3,
        waitMs: 100,
      });
      assert.deepEqual(empty['chunks'], []);
      await assert.rejects(
        s.request('process/read', { processId: 'ghost' }),
        (e: RpcError) => e.code === 'EXEC_ERR_PROCESS_NOT_FOUND' && /unknown process id ghost/.test(e.message),
      );
    });

    test('4 MB of output is bounded to the retention budget and the drop is reported', async () => {
      const r = await s.run('flood', ['sh', '-c', 'head -c 4194304 /dev/zero | tr "\\0" b']);
      assert.equal(r.exited['exitCode'], 0);
      const read = await s.request<Record<string, unknown>>('process/read', { processId: 'flood', afterSeq: 0 });
      const retained = (read['chunks'] as Array<Record<string, unknown>>).reduce(
        (n, c) => n + Buffer.from(String(c['chunk']), 'base64').length,
        0,
      );
      assert.ok(retained <= 1024 * 1024 + 65536, `retained ${retained}`);
      assert.equal((read['droppedBytes'] as number) + retained, 4 * 1024 * 1024);
      assert.ok((read['firstRetainedSeq'] as number) > 1);
    });

    test('disconnect mid-stream and resume: every byte once, in order', async () => {
      const c = await fresh();
      await c.start('count', [
        'sh',
        '-c',
        'i=0; while [ $i -lt 400 ]; do echo line-$i; i=$((i+1)); [ $((i % 50)) -eq 0 ] && sleep 0.1; done',
      ]);
      await c.waitFor(() => c.eventsOf('count').some((e) => e.method === 'process/output'));
      const seen = c.eventsOf('count').filter((e) => e.method === 'process/output');
      const lastSeq = seen.at(-1)?.params['seq'] as number;
      const before = Buffer.concat(seen.map((e) => Buffer.from(String(e.params['chunk']), 'base64')));
      await c.close();
      await sleep(300);
      const again = await TestSession.open(server.url, { resumeSessionId: c.sessionId });
      let after = Buffer.alloc(0);
      let seq = lastSeq;
      for (;;) {
        const read = await again.request<Record<string, unknown>>('process/read', {
          processId: 'count',
          afterSeq: seq,
          waitMs: 2000,
        });
        for (const chunk of read['chunks'] as Array<Record<string, unknown>>)
          after = Buffer.concat([after, Buffer.from(String(chunk['chunk']), 'base64')]);
        seq = (read['nextSeq'] as number) - 1;
        if (read['closed']) break;
      }
      const text = Buffer.concat([before, after]).toString();
      const expected = Array.from({ length: 400 }, (_, i) => `line-${i}\n`).join('');
      assert.equal(text, expected);
      await again.close();
    });

    test('process/list, session/info and session/terminateAll', async () => {
      await s.start('bg1', ['sleep', '30']);
      await s.start('bg2', ['sleep', '30']);
      const list = await s.request<{ processes: Array<Record<string, unknown>> }>('process/list', {});
      assert.equal(list.processes.find((p) => p['processId'] === 'bg1')?.['status'], 'running');
      const info = await s.request<Record<string, unknown>>('session/info', {});
      assert.equal(info['backend'], backend);
      assert.equal(info['sessionId'], s.sessionId);
      assert.ok(typeof info['workdir'] === 'string');
      if (backend === 'docker') assert.match(String(info['containerId']), /^[0-9a-f]{12,}/);
      const res = await s.request<{ terminated: number }>('session/terminateAll', {});
      assert.ok(res.terminated >= 2);
      assert.equal((await s.result('bg1')).exited['terminal'], 'terminated');
      assert.equal((await s.result('bg2')).exited['terminal'], 'terminated');
    });

    test('cwd, env, envPolicy and arg0', async () => {
      const info = await s.request<Record<string, unknown>>('session/info', {});
      const r = await s.run('env', ['sh', '-c', 'pwd; echo "$FOO|${SECRET_TOKEN:-none}|${KEEP:-none}"'], {
        cwd: `file://${info['workdir'] as string}`,
        env: { FOO: 'bar' },
        envPolicy: { inherit: 'none', set: { KEEP: 'kept', SECRET_TOKEN: 'x' } },
      });
      assert.equal(r.stdout, `${info['workdir'] as string}\nbar|x|kept\n`);
      // bash, not sh: in a busybox image sh dispatches on argv[0] and knows no applet custom-name.
      const a = await s.run('arg0', ['bash', '-c', 'echo $0'], { arg0: 'custom-name' });
      assert.equal(a.stdout, 'custom-name\n');
    });

    test('teardown', async () => {
      await s.close();
      await server.close();
    });
  });
}

function unb64All(s: TestSession, id: string): string {
  return Buffer.concat(
    s
      .eventsOf(id)
      .filter((e) => e.method === 'process/output')
      .map((e) => Buffer.from(String(e.params['chunk']), 'base64')),
  ).toString();
}
