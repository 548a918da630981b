/**
 * Bad input at the protocol edge that once got something else than a clear, bounded answer:
 * binary frames from a client that reads nothing, strings that are none of a field's values,
 * process ids that cannot be written as UTF-8, a malformed MCP `initialize`.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import WebSocket from 'ws';
import { SIGNAL_NAMES } from '../../src/protocol/index.ts';
import { requestJson } from '../http/helpers.ts';
import { call, mcpClient, textOf } from '../mcp/helpers.ts';
import { serverFor, sessionFor, until } from '../support/harness.ts';

test('binary frames from a client that reads nothing: cut at the buffer limit (4001), not buffered without end', async (t) => {
  const server = await serverFor(t, { flags: ['--ws-buffer-limit-bytes', '65536'] });
  const ws = new WebSocket(server.url);
  t.after(() => ws.terminate());
  await new Promise<void>((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  let closed: number | undefined;
  ws.on('close', (code) => {
    closed = code;
  });
  // The client reads nothing while it sends: each refusal (about 150 bytes) stays in the server.
  const tcp = (ws as unknown as { _socket: { pause(): void; resume(): void } })._socket;
  tcp.pause();
  // 30 MB of refusals: past the kernel's socket buffers and the 64 KiB limit many times over.
  for (let i = 0; i < 200_000; i++) {
    ws.send(Buffer.from([0]), { binary: true });
    if (i % 10_000 === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  tcp.resume();
  await until(() => closed !== undefined, 20_000, 'the connection closed');
  assert.equal(closed, 4001);
});

test('a string that is none of a field allowed values: the error lists them, on JSON-RPC, HTTP and MCP', async (t) => {
  const server = await serverFor(t);
  const s = await sessionFor(t, server.url);
  await s.start('sleeper', ['sleep', '30']);
  const rpc = await s.request('process/signal', { processId: 'sleeper', signal: 'SIGFOO' }).then(
    () => assert.fail('SIGFOO was accepted'),
    (e: { message: string; data: { code: string; field: string } }) => e,
  );
  assert.equal(rpc.data.code, 'EXEC_ERR_INVALID_PARAMS');
  assert.equal(rpc.data.field, 'signal');
  assert.equal(
    rpc.message,
    `invalid params: signal: must be one of ${['interrupt', ...SIGNAL_NAMES].map((v) => JSON.stringify(v)).join(', ')}`,
  );
  // A value of another type keeps its type error.
  await assert.rejects(s.request('process/signal', { processId: 'sleeper', signal: 9 }), /signal: must be string/);

  const http = await requestJson(`${server.httpUrl}/v1/sessions/${s.sessionId}/approvals/nope`, 'POST', {
    decision: 'yes',
  });
  assert.equal(http.status, 400);
  assert.deepEqual(http.body, {
    code: 'EXEC_ERR_INVALID_PARAMS',
    message: 'body/decision must be one of "approved", "approved-for-session", "denied", "abort"',
  });

  const { client } = await mcpClient(t, server.httpUrl);
  const decide = await call(client, 'decide_approval', { approval_id: 'nope', decision: 'yes' });
  assert.equal(
    textOf(decide),
    'decide_approval failed: invalid arguments: /decision must be one of "approved", "approved-for-session", "denied", "abort" (EXEC_ERR_INVALID_PARAMS)',
  );
  // An unknown field is named as one (docs/mcp.md), not as "schema is false".
  const extra = await call(client, 'list_sessions', { bogus: 1 });
  assert.equal(textOf(extra), 'list_sessions failed: invalid arguments: unknown field bogus (EXEC_ERR_INVALID_PARAMS)');
});

test('a process id with an unpaired surrogate is refused: its binary output frames could not name it', async (t) => {
  const server = await serverFor(t);
  const s = await sessionFor(t, server.url, { binaryOutput: true });
  await assert.rejects(s.start('x\ud800', ['true']), (e: { message: string; data: { field: string } }) => {
    assert.equal(e.data.field, 'processId');
    assert.match(e.message, /processId: must be well-formed Unicode/);
    return true;
  });
  // A well-formed id outside the BMP is fine: its frames name it as it was sent.
  const id = 'x\u{1F600}';
  await s.start(id, ['echo', 'hi']);
  await s.waitFor((all) => all.some((n) => n.method === 'process/closed' && n.params['processId'] === id));
  assert.ok(s.notifications.some((n) => n.method === 'process/output' && n.params['processId'] === id));
});

test('an MCP initialize with bad params is told so, not to initialize first', async (t) => {
  const server = await serverFor(t);
  const r = await requestJsonWithAccept(`${server.httpUrl}/mcp`, {
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: 5 },
  });
  assert.equal(r.status, 400);
  assert.equal(r.body.error.code, -32602);
  assert.match(r.body.error.message, /^invalid initialize params: protocolVersion/);
});

/** A POST to /mcp as a Streamable HTTP client sends it (it accepts JSON and event streams). */
async function requestJsonWithAccept(
  url: string,
  body: unknown,
): Promise<{ status: number; body: { error: { code: number; message: string } } }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as { error: { code: number; message: string } } };
}

test('initialized sent right behind initialize, before its answer, counts: the connection is ready', async (t) => {
  const server = await serverFor(t);
  const ws = new WebSocket(server.url);
  t.after(() => ws.terminate());
  const answers = new Map<unknown, { result?: unknown; error?: { data: { code: string } } }>();
  ws.on('message', (data) => {
    const m = JSON.parse(String(data)) as { id?: unknown; result?: unknown; error?: { data: { code: string } } };
    if (m.id !== undefined) answers.set(m.id, m);
  });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  // Both leave at once: the notification arrives while the session is still being made.
  ws.send(JSON.stringify({ id: 1, method: 'initialize', params: { clientName: 'pipelined' } }));
  ws.send(JSON.stringify({ method: 'initialized' }));
  await until(() => answers.has(1), 20_000, 'the initialize answer');
  assert.ok(answers.get(1)?.result, JSON.stringify(answers.get(1)));
  ws.send(JSON.stringify({ id: 2, method: 'process/list' }));
  await until(() => answers.has(2), 20_000, 'the process/list answer');
  assert.deepEqual(answers.get(2)?.result, { processes: [] }, JSON.stringify(answers.get(2)));
});

test('an environment variable named __proto__ reaches the command (env, envPolicy.set, a session env)', async (t) => {
  const server = await serverFor(t);
  // JSON.parse makes `__proto__` an own key, as the server's parser does with what a client sends.
  const named = (value: string): Record<string, string> => JSON.parse(`{"__proto__": ${JSON.stringify(value)}}`);
  const withEnv = await sessionFor(t, server.url, { session: { env: named('from-session') } });
  assert.match((await withEnv.run('session', ['env'])).stdout, /^__proto__=from-session$/m);
  // A session's env is laid over a start's envPolicy: these run in a session without one.
  const s = await sessionFor(t, server.url);
  assert.match((await s.run('env', ['env'], { env: named('from-env') })).stdout, /^__proto__=from-env$/m);
  const policy = { envPolicy: { set: named('from-set') } };
  assert.match((await s.run('policy', ['env'], policy)).stdout, /^__proto__=from-set$/m);
});
