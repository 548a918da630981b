/**
 * Process limits on the local backend, each test on a server of its own with the flags it needs:
 * retention and pruning of ended processes, a slow client (the command waits) against a stalled
 * one (cut after the stall timeout, then resumed), the early-exit hold budget, and flow control
 * of a PTY stream. The methods themselves, on both backends, are in processes.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { RpcError } from '../../src/client/rpc-connection.ts';
import { assertSameText } from '../support/assert-text.ts';
import { serverFor, sessionFor, sleep, stopAndGoBurst, TestSession } from '../support/harness.ts';

/**
 * process/start sent raw on the paused connection of `s` (a paused client cannot read the reply;
 * the server streams on), then 1.5 s later the connection resumed.
 */
async function startRawThenResume(s: TestSession, id: number | string, params: Record<string, unknown>): Promise<void> {
  s.conn.socket.send(JSON.stringify({ id, method: 'process/start', params }));
  await sleep(1500);
  s.conn.socket.resume();
}

describe('limits', { timeout: 120_000 }, () => {
  test('ended processes are dropped after the retention time', async (t) => {
    const server = await serverFor(t, { flags: ['--exited-retention-ms', '300'] });
    const s = await sessionFor(t, server.url);
    await s.run('short', ['true']);
    await sleep(700);
    await assert.rejects(
      s.request('process/read', { processId: 'short' }),
      (e: RpcError) => e.code === 'EXEC_ERR_PROCESS_NOT_FOUND',
    );
  });

  test('pruning protects the most recent and drops the least recently used ended process first', async (t) => {
    const server = await serverFor(t, { flags: ['--max-processes', '10'] });
    const s = await sessionFor(t, server.url);
    await s.run('done-0', ['true']);
    await sleep(5);
    await s.start('run-1', ['sleep', '30']);
    for (let i = 2; i < 10; i++) {
      await sleep(5);
      await s.start(`run-${i}`, ['sleep', '30']);
    }
    await s.start('new', ['sleep', '30']);
    const ids = (await s.request<{ processes: Array<Record<string, unknown>> }>('process/list', {})).processes.map(
      (p) => p['processId'],
    );
    assert.ok(!ids.includes('done-0'), 'the ended LRU process was pruned');
    assert.ok(ids.includes('run-1') && ids.includes('new'));
    await s.start('newer', ['sleep', '30']);
    const ids2 = (await s.request<{ processes: Array<Record<string, unknown>> }>('process/list', {})).processes.map(
      (p) => p['processId'],
    );
    assert.ok(!ids2.includes('run-1'), 'with no ended process, the LRU running one is pruned');
    await s.request('session/terminateAll', {});
  });

  test('a healthy client slower than its command gets every byte: the command waits, nobody is cut', async (t) => {
    const server = await serverFor(t, { flags: ['--ws-buffer-limit-bytes', '1048576'] });
    const s = await sessionFor(t, server.url, { session: { sandbox: { type: 'danger-full-access' } } });
    // Read in fits and starts, far slower than `head` writes.
    const burst = await stopAndGoBurst(s);
    const r = await s.result('burst', 60_000);
    assert.equal(burst.closed(), false);
    assert.equal(r.stdout.length, 33554432 + 4);
    assert.ok(r.stdout.endsWith('zend\n'));
    const seqs = r.events.map((e) => e.params['seq'] as number);
    assert.deepEqual(
      seqs,
      seqs.map((_, i) => i + 1),
      'no gap: nothing was dropped',
    );
  });

  test('a client that stays behind is disconnected after the stall timeout and can resume; its process keeps running', async (t) => {
    const server = await serverFor(t, { flags: ['--ws-buffer-limit-bytes', '65536', '--ws-stall-timeout-ms', '500'] });
    const s = await TestSession.open(server.url);
    const closed = new Promise<number>((resolve) => s.conn.onClose((code) => resolve(code)));
    s.conn.socket.pause();
    await new Promise<void>((resolve) => {
      s.conn.socket.once('pong', () => resolve());
      s.conn.socket.ping();
      setTimeout(resolve, 200);
    });
    await startRawThenResume(s, 1, {
      processId: 'firehose',
      argv: ['sh', '-c', 'while :; do head -c 1048576 /dev/zero; sleep 0.05; done'],
      tty: false,
    });
    assert.equal(await closed, 4001);
    const again = await sessionFor(t, server.url, { resumeSessionId: s.sessionId });
    const list = await again.request<{ processes: Array<Record<string, unknown>> }>('process/list', {});
    assert.equal(list.processes[0]?.['processId'], 'firehose');
    assert.equal(list.processes[0]?.['status'], 'running');
    await again.request('session/terminateAll', {});
  });
});

describe('early-exit hold budget', () => {
  test('a sandboxed command printing more than the hold budget inside the window loses nothing', async (t) => {
    const server = await serverFor(t);
    const s = await sessionFor(t, server.url);
    const r = await s.run('big', ['sh', '-c', 'head -c 4194304 /dev/zero | tr "\\0" c; echo; echo tail-marker']);
    assert.equal(r.stdout.length, 4194304 + 1 + 'tail-marker\n'.length);
    assert.equal(r.exited['exitCode'], 0);
  });
});

describe('flow control and PTY teardown', () => {
  test('a PTY program streaming to a client that is behind delivers every byte, in order', {
    timeout: 120_000,
  }, async (t) => {
    const server = await serverFor(t, { flags: ['--ws-buffer-limit-bytes', '262144'] });
    const s = await sessionFor(t, server.url, { session: { sandbox: { type: 'danger-full-access' } } });
    s.conn.socket.pause();
    await startRawThenResume(s, 'x', {
      processId: 'ptyburst',
      argv: ['sh', '-c', 'head -c 4194304 /dev/zero | tr "\\0" p; echo done'],
      tty: true,
    });
    const r = await s.result('ptyburst', 60_000);
    assertSameText(r.pty.replace(/\r\n/g, '\n'), `${'p'.repeat(4194304)}done\n`, 'PTY output');
    assert.equal(r.exited['exitCode'], 0);
  });
});
