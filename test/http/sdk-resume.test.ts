/**
 * The SDK's handles across refusals and resumes, against a real server: a refused duplicate
 * start, a process pruned while disconnected, output the server no longer retained, and
 * automatic reconnection after `disconnect()` or a refused `deleteSession()`.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ExecServerClient, type ExecServerHttpError, RpcError } from '../../src/index.ts';
import { sleep, startServer, until, within } from '../support/harness.ts';

test('SDK: a refused duplicate processId leaves the running handle whole', { timeout: 60_000 }, async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const client = await ExecServerClient.connect(server.url);
  t.after(() => client.deleteSession().catch(() => undefined));
  const first = await client.exec(['sh', '-c', 'sleep 0.5; echo done'], { processId: 'dup' });
  await assert.rejects(
    client.exec(['true'], { processId: 'dup' }),
    (err: unknown) => err instanceof RpcError && err.code === 'EXEC_ERR_PROCESS_EXISTS',
  );
  const r = await within(first.wait(), 10_000, 'the first handle');
  assert.equal(r.stdout, 'done\n');
  assert.deepEqual(
    (await client.listProcesses()).map((p) => [p.processId, p.status]),
    [['dup', 'exited']],
  );
});

test('SDK: a process pruned while disconnected ends lost on resume; the others resume', {
  timeout: 60_000,
}, async (t) => {
  const server = await startServer({ flags: ['--exited-retention-ms', '0'] });
  t.after(() => server.close());
  const client = await ExecServerClient.connect(server.url);
  t.after(() => client.deleteSession().catch(() => undefined));
  // The reconnect must come after `short` ended and before `long` does: wide margins on both
  // sides (the reconnect lands about 2 s after the drop), since a loaded machine is slow at either.
  const short = await client.exec(['sh', '-c', 'echo before; sleep 0.3; echo after'], { check: false });
  const long = await client.exec(['sh', '-c', 'echo a; sleep 5; echo b']);
  let seen = '';
  short.onOutput((c) => (seen += c.text));
  await until(() => seen === 'before\n', 5000, 'first output');
  client.connection.socket.terminate();
  // `short` ends and is dropped by the server meanwhile.
  await until(() => !client.connected, 5000, 'the drop');
  await sleep(2000);
  await within(client.reconnect(), 10_000, 'reconnect');
  const lost = await within(short.wait(), 5000, 'the pruned handle');
  assert.deepEqual([lost.terminal, lost.exitCode, lost.stdout], ['lost', -1, 'before\n']);
  assert.equal((await within(long.wait(), 10_000, 'the other handle')).stdout, 'a\nb\n');
  await within(client.reconnect(), 10_000, 'a second reconnect');
});

test('SDK: output the server no longer retained when it resumed is counted in droppedBytes', {
  timeout: 60_000,
}, async (t) => {
  const server = await startServer({ flags: ['--output-retention-bytes', '65536'] });
  t.after(() => server.close());
  const client = await ExecServerClient.connect(server.url);
  t.after(() => client.deleteSession().catch(() => undefined));
  const total = 300_000 + 'END\n'.length;
  const big = await client.exec(['sh', '-c', "sleep 0.3; head -c 300000 /dev/zero | tr '\\0' a; echo END"]);
  client.connection.socket.terminate();
  await until(() => !client.connected, 5000, 'the drop');
  await sleep(1500);
  await within(client.reconnect(), 10_000, 'reconnect');
  const r = await within(big.wait(), 10_000, 'the handle');
  assert.ok(r.stdout.endsWith('aaaaEND\n'));
  assert.ok(r.droppedBytes > 0, `droppedBytes ${r.droppedBytes}`);
  assert.equal(r.stdout.length + r.droppedBytes, total, 'what arrived and what is counted lost make the whole');
  assert.equal(big.droppedBytes, r.droppedBytes);

  // A resume within what the server retains loses nothing, and says so.
  const small = await client.exec(['sh', '-c', 'echo one; sleep 0.8; echo two']);
  await sleep(300);
  client.connection.socket.terminate();
  await until(() => !client.connected, 5000, 'the second drop');
  await within(client.reconnect(), 10_000, 'reconnect');
  const whole = await within(small.wait(), 10_000, 'the second handle');
  assert.deepEqual([whole.stdout, whole.droppedBytes], ['one\ntwo\n', 0]);
});

test('SDK: disconnect() then reconnect() turns automatic reconnection back on', { timeout: 60_000 }, async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const client = await ExecServerClient.connect(server.url, { autoReconnect: { attempts: 20, delayMs: 50 } });
  t.after(() => client.deleteSession().catch(() => undefined));
  const p = await client.exec(['sh', '-c', 'sleep 0.5; echo one']);
  await client.disconnect();
  await client.reconnect();
  assert.equal((await within(p.wait(), 10_000, 'the handle across disconnect')).stdout, 'one\n');
  const q = await client.exec(['sh', '-c', 'sleep 0.5; echo after-drop']);
  client.connection.socket.terminate();
  assert.equal((await within(q.wait(), 10_000, 'the handle across a drop')).stdout, 'after-drop\n');
  assert.ok(client.connected);
});

test('SDK: a refused deleteSession() leaves automatic reconnection on', { timeout: 60_000 }, async (t) => {
  const server = await startServer({ flags: ['--token', 'tok'] });
  t.after(() => server.close());
  const owner = await ExecServerClient.connect(server.url, { token: 'tok' });
  t.after(() => owner.http.deleteSession(owner.sessionId).catch(() => undefined));
  const share = await owner.createToken({ access: 'read' });
  const viewer = await ExecServerClient.connect(server.url, {
    token: share.token,
    resumeSessionId: owner.sessionId,
    autoReconnect: { attempts: 20, delayMs: 50 },
  });
  t.after(() => viewer.disconnect());
  await assert.rejects(
    viewer.deleteSession(),
    (err: ExecServerHttpError) => err.status === 403 && err.code === 'EXEC_ERR_TOKEN_READ_ONLY',
  );
  const dropped = viewer.connection;
  dropped.socket.terminate();
  await until(() => viewer.connection !== dropped && viewer.connected, 10_000, 'the automatic resume');
  assert.equal((await viewer.sessionInfo()).sessionId, owner.sessionId);
});
