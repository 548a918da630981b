/**
 * What the TypeScript SDK offers like the Python SDK (docs/python-sdk.md), against a real
 * server: `wait({ timeoutMs })` leaving the process running, `handle.disconnect()` and a later
 * `attach`, the session's files on `client.files`, and `sendStdin` refusing input it cannot write.
 * The SDK's names are read off the module so that one missing fails its own test.
 */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { type TestContext, test } from 'node:test';
import * as sdk from '../../src/index.ts';
import { ExecServerClient, RpcError, asProcessId, type OutputChunk } from '../../src/index.ts';
import { serverFor, sleep, until, within } from '../support/harness.ts';

async function clientFor(
  t: TestContext,
  flags: string[] = [],
  opts: sdk.ConnectOptions = {},
): Promise<ExecServerClient> {
  const server = await serverFor(t, { flags });
  const client = await ExecServerClient.connect(server.url, opts);
  t.after(() => client.deleteSession().catch(() => undefined));
  return client;
}

async function statusOf(client: ExecServerClient, processId: string): Promise<string | undefined> {
  return (await client.listProcesses()).find((p) => p.processId === processId)?.status;
}

test('SDK parity: wait({ timeoutMs }) rejects with WaitTimeoutError and leaves the process running', {
  timeout: 60_000,
}, async (t) => {
  const client = await clientFor(t);
  const proc = await client.exec(['sh', '-c', 'read x; echo "got $x"'], { stdin: 'pipe' });
  const started = Date.now();
  await within(
    assert.rejects(proc.wait({ timeoutMs: 300 }), (err: unknown) => {
      assert.ok(err instanceof sdk.WaitTimeoutError, String(err));
      assert.deepEqual([err.processId, err.timeoutMs], [proc.processId, 300]);
      return true;
    }),
    10_000,
    'wait with a timeout',
  );
  assert.ok(Date.now() - started >= 250, 'not before its time');
  assert.equal(await statusOf(client, proc.processId), 'running');
  assert.equal(proc.done, false);
  await proc.sendStdin('x\n');
  await proc.closeStdin();
  // A timeout long enough: the result, and no timer left to fire.
  assert.equal((await within(proc.wait({ timeoutMs: 30_000 }), 10_000, 'the second wait')).stdout, 'got x\n');
  assert.equal((await proc.wait({ timeoutMs: 0 })).stdout, 'got x\n', 'an ended process answers at once');
  for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31])
    await assert.rejects(proc.wait({ timeoutMs: bad }), RangeError, String(bad));
});

test('SDK parity: handle.disconnect() stops listening; the process runs on and attach picks it up', {
  timeout: 60_000,
}, async (t) => {
  const client = await clientFor(t);
  const proc = await client.exec(['sh', '-c', 'echo first; read x; echo "second $x"'], { stdin: 'pipe' });
  const heard: string[] = [];
  let exited = false;
  proc.onOutput((c: OutputChunk) => heard.push(c.text));
  proc.onExit(() => (exited = true));
  await until(() => heard.join('') === 'first\n', 10_000, 'the first line');
  const pending = proc.wait();
  const seen = proc.lastSeq;
  proc.disconnect();
  const detached = (err: unknown): boolean => {
    assert.ok(err instanceof sdk.HandleDisconnectedError, String(err));
    assert.equal(err.processId, proc.processId);
    return true;
  };
  await within(assert.rejects(pending, detached), 5000, 'the pending wait');
  await within(assert.rejects(proc.wait(), detached), 5000, 'a later wait');
  assert.equal(await statusOf(client, proc.processId), 'running');

  // The detached handle still writes; what the process prints then goes to the new handle only.
  const again = await client.attach(proc.processId, { afterSeq: seen });
  assert.notEqual(again, proc);
  await proc.sendStdin('y\n');
  const r = await within(again.wait(), 10_000, 'the attached handle');
  assert.deepEqual([r.exitCode, r.stdout], [0, 'second y\n']);
  await sleep(100);
  assert.deepEqual(heard, ['first\n']);
  assert.equal(exited, false);
  assert.equal(proc.done, false);
  assert.equal(proc.lastSeq, seen);

  // An ended handle keeps its result.
  const done = await client.exec(['echo', 'kept']);
  await done.wait();
  done.disconnect();
  assert.equal((await done.wait()).stdout, 'kept\n');
});

test('SDK parity: client.files reads, writes, lists, stats, makes, removes, uploads, downloads', {
  timeout: 60_000,
}, async (t) => {
  const client = await clientFor(t);
  const dir = (await client.sessionInfo()).workdir;
  const files = client.files;
  await files.writeFile(`${dir}/a.txt`, 'alpha\n');
  assert.equal((await files.readFile(`${dir}/a.txt`)).toString(), 'alpha\n');
  await files.mkdir(`${dir}/sub/deep`, { recursive: true });
  assert.equal((await files.upload(`${dir}/sub/b.bin`, Buffer.from([0, 1, 2, 255]))).bytesWritten, 4);
  assert.deepEqual((await files.list(`${dir}/sub`)).map((e) => [e.fileName, e.isDirectory]).sort(), [
    ['b.bin', false],
    ['deep', true],
  ]);
  assert.equal((await files.stat(`${dir}/sub/b.bin`)).size, 4);
  const parts: Buffer[] = [];
  const sink = new Writable({
    write(c: Buffer, _e, cb) {
      parts.push(c);
      cb();
    },
  });
  assert.equal(await files.download(`${dir}/sub/b.bin`, sink), 4);
  assert.deepEqual([...Buffer.concat(parts)], [0, 1, 2, 255]);
  await files.remove(`${dir}/sub`, { recursive: true });
  assert.deepEqual(
    (await files.list(dir)).map((e) => e.fileName),
    ['a.txt'],
  );
  // The JSON-RPC calls go over the client's current connection, also after a resume.
  client.connection.socket.terminate();
  await until(() => !client.connected, 5000, 'the drop');
  await client.reconnect();
  assert.equal((await files.readFile(`${dir}/a.txt`)).toString(), 'alpha\n');
  await assert.rejects(
    files.readFile(`${dir}/missing`),
    (err: unknown) => err instanceof RpcError && err.code === 'EXEC_ERR_NOT_FOUND',
  );
});

test('SDK parity: sendStdin to a closed stdin rejects with StdinClosedError', { timeout: 60_000 }, async (t) => {
  const client = await clientFor(t);
  const closed =
    (id: string) =>
    (err: unknown): boolean => {
      assert.ok(err instanceof sdk.StdinClosedError, String(err));
      assert.equal(err.processId, id);
      return true;
    };
  const afterClose = await client.exec(['sleep', '30'], { stdin: 'pipe', check: false });
  await afterClose.sendStdin('accepted while open\n');
  await afterClose.closeStdin();
  await assert.rejects(afterClose.sendStdin('late\n'), closed(afterClose.processId));

  const noPipe = await client.exec(['sleep', '30'], { check: false });
  await assert.rejects(noPipe.sendStdin('x'), closed(noPipe.processId));
  // Exactly \u0003 to a pipe process without stdin is still an interrupt (docs/protocol.md).
  await noPipe.sendStdin('\u0003');
  assert.equal((await within(noPipe.wait(), 10_000, 'the interrupted process')).signal, 'SIGINT');

  const ended = await client.exec(['true'], { stdin: 'pipe' });
  await ended.wait();
  await assert.rejects(ended.sendStdin('x'), closed(ended.processId));

  await afterClose.kill();
});

test('SDK parity: stdin given to exec() that the command ends without reading is no error', {
  timeout: 60_000,
}, async (t) => {
  const client = await clientFor(t);
  // `true` ends long before 2 MiB of input has arrived and been decoded: the server answers
  // stdinClosed to the SDK's write then.
  const input = Buffer.alloc(2 * 1024 * 1024, 'x');
  for (let i = 0; i < 5; i++) {
    const proc = await client.exec(['true'], { stdin: input });
    assert.equal((await proc.wait()).exitCode, 0);
  }
});

test('SDK parity: sendStdin to a pruned or still-starting process rejects as the other calls do', {
  timeout: 60_000,
}, async (t) => {
  let approve: (() => void) | undefined;
  const client = await clientFor(t, ['--exited-retention-ms', '0'], {
    session: { approvalPolicy: 'untrusted' },
    onApproval: () => new Promise((resolve) => (approve = () => resolve('approved'))),
  });
  const starting = client.exec(['cat'], { processId: 'waits', stdin: 'pipe' });
  await until(() => approve !== undefined, 10_000, 'the approval request');
  const early = new sdk.ExecHandle(asProcessId('waits'), ['cat'], () => client);
  await assert.rejects(
    early.sendStdin('too early'),
    (err: unknown) => err instanceof RpcError && err.code === 'EXEC_ERR_PROCESS_STARTING',
  );
  approve?.();
  const cat = await starting;
  await cat.closeStdin();
  await within(cat.wait(), 10_000, 'cat');
  for (let i = 0; i < 50 && (await statusOf(client, 'waits')) !== undefined; i++) await sleep(50);
  await assert.rejects(
    cat.sendStdin('after the prune'),
    (err: unknown) => err instanceof RpcError && err.code === 'EXEC_ERR_PROCESS_NOT_FOUND',
  );
});
