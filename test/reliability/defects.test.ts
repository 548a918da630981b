/**
 * Small defects a hostile client found (docs/reliability.md, cases D1-D4), on both backends
 * where they apply: bad working directories are clear errors, /proc files read whole, and a
 * client that falls behind is told why it is cut off.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import WebSocket from 'ws';
import { RpcError } from '../../src/client/rpc-connection.ts';
import { BACKENDS } from '../support/backends.ts';
import { startServer, TestSession } from '../support/harness.ts';

for (const backend of BACKENDS) {
  describe(`bad working directories [${backend}]`, { timeout: 120_000 }, () => {
    test('D1 a cwd that is a file fails the start, and D2 a cwd with a NUL byte is invalid', async (t) => {
      const server = await startServer({ backend });
      t.after(() => server.close());
      const s = await TestSession.open(server.url, { session: { sandbox: { type: 'workspace-write' } } });
      t.after(() => s.close());
      const workdir = String((await s.request<Record<string, unknown>>('session/info', {}))['workdir']);
      assert.equal((await s.run('mk', ['sh', '-c', 'echo x > plain-file'])).exited['exitCode'], 0);
      const invalid = (err: unknown, code: string, message: RegExp): boolean =>
        err instanceof RpcError && err.code === code && message.test(err.message);
      // One answer on both backends (test/protocol/spawn-failures.test.ts has the whole table).
      await assert.rejects(s.start('f', ['true'], { cwd: `${workdir}/plain-file` }), (err) =>
        invalid(err, 'EXEC_ERR_SPAWN_FAILED', /plain-file: Not a directory$/),
      );
      await assert.rejects(s.start('n', ['true'], { cwd: `${workdir}/a\u0000b` }), (err) =>
        invalid(err, 'EXEC_ERR_INVALID_PARAMS', /NUL byte/),
      );
      await assert.rejects(s.start('u', ['true'], { cwd: `file://${workdir}/a%00b` }), (err) =>
        invalid(err, 'EXEC_ERR_INVALID_PARAMS', /NUL byte/),
      );
      // The session is still usable.
      assert.equal((await s.run('ok', ['echo', 'fine'])).stdout, 'fine\n');
    });
  });
}

test('D3 fs/readFile of a /proc file returns all of it (local, unsandboxed session)', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const s = await TestSession.open(server.url, { session: { sandbox: { type: 'danger-full-access' } } });
  t.after(() => s.close());
  const r = await s.request<{ dataBase64: string }>('fs/readFile', { path: '/proc/self/status' });
  const text = Buffer.from(r.dataBase64, 'base64').toString('utf8');
  assert.match(text, /^Name:/);
  assert.match(text, /\nVmRSS:/);
  assert.ok(text.length > 200, `${text.length} bytes`);
});

test('D4 a client cut as a slow consumer sees close code 4001 once it reads again', { timeout: 120_000 }, async (t) => {
  const server = await startServer({ flags: ['--ws-stall-timeout-ms', '500', '--ws-buffer-limit-bytes', '262144'] });
  t.after(() => server.close());
  const ws = new WebSocket(server.url);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  let id = 0;
  const send = (method: string, params: unknown, notify = false): void =>
    ws.send(JSON.stringify(notify ? { method, params } : { id: ++id, method, params }));
  const initialized = new Promise((resolve) => ws.once('message', resolve));
  send('initialize', { clientName: 'slow', session: { sandbox: { type: 'danger-full-access' } } });
  await initialized;
  send('initialized', {}, true);
  // The flood is under way before the client stops reading (a loaded machine may take a while
  // to start it, and a pause before any output would end with nothing to cut).
  const flowing = new Promise<void>((resolve) => {
    const onMessage = (data: Buffer): void => {
      if (String(data).includes('"process/output"')) {
        ws.off('message', onMessage);
        resolve();
      }
    };
    ws.on('message', onMessage);
  });
  send('process/start', { processId: 'flood', argv: ['sh', '-c', 'head -c 50000000 /dev/zero | base64'], tty: false });
  await flowing;
  // Stop reading for a while (longer than the stall timeout), then read again.
  const raw = (ws as unknown as { _socket: { pause(): void; resume(): void } })._socket;
  raw.pause();
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.once('close', (code, reason) => resolve({ code, reason: String(reason) })),
  );
  setTimeout(() => raw.resume(), 3_000);
  const { code, reason } = await closed;
  assert.equal(code, 4001);
  assert.match(reason, /slow consumer/);
});
