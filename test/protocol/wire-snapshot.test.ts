/**
 * The wire protocol, frozen: every JSON-RPC method's params schema, the OpenAPI document of the
 * HTTP API, and the shapes of real answers and notifications of one scripted conversation over
 * WebSocket and HTTP are compared with `wire-snapshot.json`. A change of the protocol shows up
 * here as a diff; one made on purpose is recorded with `UPDATE_WIRE_SNAPSHOT=1` and said in the
 * commit (docs/protocol.md describes the protocol). Every answer and notification is also checked
 * against its result schema in src/protocol/, so the schemas say what the server really sends.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import { Compile } from 'typebox/compile';
import { RPC_METHODS, RPC_NOTIFICATIONS } from '../../src/protocol/index.ts';
import type { Connection } from '../../src/rpc/connection.ts';
import { MethodTable } from '../../src/rpc/method-table.ts';
import { registerFsMethods } from '../../src/rpc/methods/fs-methods.ts';
import { registerProcessMethods } from '../../src/rpc/methods/process-methods.ts';
import { registerSessionMethods } from '../../src/rpc/methods/session-methods.ts';
import { RpcConnection, RpcError } from '../../src/client/rpc-connection.ts';
import { b64, startServer, TestSession } from '../support/harness.ts';

const SNAPSHOT = new URL('./wire-snapshot.json', import.meta.url);

/** Keys whose values are part of the protocol (enumerations, codes), kept as they are. */
const LITERAL_KEYS = new Set([
  'code',
  'status',
  'terminal',
  'stream',
  'method',
  'type',
  'purpose',
  'decision',
  'watching',
  'eof',
  'exited',
  'closed',
]);

/** A value reduced to its shape: types instead of values, except for `LITERAL_KEYS`; array element shapes deduplicated. */
function shape(value: unknown, key = ''): unknown {
  if (value === null) return 'null';
  if (Array.isArray(value)) {
    const seen = new Map<string, unknown>();
    for (const v of value) {
      const s = shape(v);
      seen.set(JSON.stringify(s), s);
    }
    return [...seen.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([, s]) => s);
  }
  if (typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(value as object).sort()) out[k] = shape((value as Record<string, unknown>)[k], k);
    return out;
  }
  if (LITERAL_KEYS.has(key) && (typeof value === 'string' || typeof value === 'boolean' || typeof value === 'number'))
    return value;
  return typeof value;
}

async function rpcError(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    if (err instanceof RpcError) return { rpcCode: err.rpcCode, message: 'string', data: shape(err.data) };
    throw err;
  }
  throw new Error('expected an error answer');
}

function methodSchemas(): Record<string, unknown> {
  const table = new MethodTable<Connection>();
  registerSessionMethods(table);
  registerProcessMethods(table);
  registerFsMethods(table);
  const out: Record<string, unknown> = {};
  for (const name of table.names().sort()) {
    const m = table.get(name);
    out[name] = { requires: m?.requires, params: JSON.parse(JSON.stringify(m?.schema)) };
  }
  return out;
}

test('wire snapshot: JSON-RPC schemas, OpenAPI and the shapes of real answers are unchanged', {
  timeout: 120_000,
}, async (t) => {
  const server = await startServer({ flags: ['--max-message-bytes', '65536'] });
  t.after(() => server.close());
  const live: Record<string, unknown> = {};
  const mismatches: string[] = [];
  /** Checks `value` against the protocol's schema for `method` (a method's result or a notification's params). */
  const conforms = (method: string, value: unknown): void => {
    const schema =
      method in RPC_METHODS
        ? RPC_METHODS[method as keyof typeof RPC_METHODS].result
        : RPC_NOTIFICATIONS[method as keyof typeof RPC_NOTIFICATIONS];
    if (schema === undefined) return;
    const check = Compile(schema);
    if (!check.Check(value))
      mismatches.push(
        `${method}: ${JSON.stringify([...check.Errors(value)].slice(0, 3))} in ${JSON.stringify(value).slice(0, 300)}`,
      );
  };
  const record = (name: string, value: unknown): void => {
    conforms(name.split(' ')[0] ?? name, value);
    live[name] = shape(value);
  };

  // ---- JSON-RPC over WebSocket ----
  const raw = await RpcConnection.open(server.url);
  live['error: before initialize'] = await rpcError(raw.request('process/list', {}));
  const frameAnswer = (data: string | Buffer): Promise<unknown> =>
    new Promise((resolve) => {
      raw.socket.once('message', (m) => resolve(shape(JSON.parse(String(m)))));
      raw.socket.send(data, { binary: typeof data !== 'string' });
    });
  live['error: parse'] = await frameAnswer('{not json');
  live['error: binary frame'] = await frameAnswer(Buffer.from('{}'));
  live['error: empty batch'] = await frameAnswer('[]');
  await raw.close();

  const s = await TestSession.open(server.url);
  t.after(() => s.close());
  record('initialize', s.initResult);
  live['error: initialize twice'] = await rpcError(s.request('initialize', { clientName: 'x' }));
  live['error: unknown method'] = await rpcError(s.request('no/such', {}));
  live['error: invalid params'] = await rpcError(s.request('process/start', { processId: 'p' }));
  live['error: unknown process'] = await rpcError(s.request('process/read', { processId: 'missing' }));
  record('environment/info', await s.request('environment/info', {}));
  record('environmentConfig/read', await s.request('environmentConfig/read', {}));
  record('session/info', await s.request('session/info', {}));

  const workdir = String((await s.request('session/info', {}))['workdir']);
  record('process/start', await s.start('echo', ['sh', '-c', 'echo out; echo err >&2; exit 3']));
  const echo = await s.result('echo');
  for (const method of new Set(echo.events.map((n) => n.method)))
    live[`notification ${method}`] = shape(echo.events.filter((n) => n.method === method).map((n) => n.params));
  record('process/read', await s.request('process/read', { processId: 'echo', afterSeq: 0 }));
  record(
    'process/read (waiting, past the end)',
    await s.request('process/read', { processId: 'echo', afterSeq: 1000, waitMs: 10 }),
  );

  await s.start('cat', ['cat'], { pipeStdin: true });
  record('process/write', await s.request('process/write', { processId: 'cat', chunk: b64('hi\n'), writeId: 'w1' }));
  record('process/closeStdin', await s.request('process/closeStdin', { processId: 'cat' }));
  await s.result('cat');
  record('process/write (after exit)', await s.request('process/write', { processId: 'cat', chunk: b64('x') }));

  await s.start('tty', ['sh', '-c', 'read x'], { tty: true, size: { cols: 80, rows: 24 } });
  record('process/resize', await s.request('process/resize', { processId: 'tty', cols: 100, rows: 30 }));
  record('process/signal', await s.request('process/signal', { processId: 'tty', signal: 'SIGTERM' }));
  await s.result('tty');
  live['error: resize without tty'] = await rpcError(
    s.request('process/resize', { processId: 'echo', cols: 10, rows: 10 }),
  );

  await s.start('sleeper', ['sleep', '30']);
  record('process/list', await s.request('process/list', {}));
  record('process/terminate', await s.request('process/terminate', { processId: 'sleeper' }));
  await s.result('sleeper');
  record('process/terminate (ended)', await s.request('process/terminate', { processId: 'sleeper' }));
  record('session/terminateAll', await s.request('session/terminateAll', {}));

  const f = `${workdir}/snap.txt`;
  record('fs/writeFile', await s.request('fs/writeFile', { path: f, dataBase64: b64('hello') }));
  record('fs/readFile', await s.request('fs/readFile', { path: f }));
  record('fs/getMetadata', await s.request('fs/getMetadata', { path: f }));
  record('fs/createDirectory', await s.request('fs/createDirectory', { path: `${workdir}/d/e`, recursive: true }));
  record('fs/readDirectory', await s.request('fs/readDirectory', { path: workdir }));
  record('fs/canonicalize', await s.request('fs/canonicalize', { path: `file://${f}` }));
  record(
    'fs/copy',
    await s.request('fs/copy', { sourcePath: f, destinationPath: `${workdir}/copy.txt`, recursive: false }),
  );
  record('fs/remove', await s.request('fs/remove', { path: `${workdir}/copy.txt` }));
  live['error: fs not found'] = await rpcError(s.request('fs/readFile', { path: `${workdir}/missing` }));
  const opened = await s.request<{ handleId: string }>('fs/open', { path: f });
  record('fs/open', opened);
  record('fs/readBlock', await s.request('fs/readBlock', { handleId: opened.handleId, offset: 0, len: 3 }));
  record('fs/close', await s.request('fs/close', { handleId: opened.handleId }));
  const w = await s.request<{ handleId: string }>('fs/openWrite', { path: `${workdir}/chunked.txt` });
  record('fs/openWrite', w);
  record('fs/writeBlock', await s.request('fs/writeBlock', { handleId: w.handleId, chunk: b64('abc') }));
  record('fs/closeWrite', await s.request('fs/closeWrite', { handleId: w.handleId }));
  record('fs/watchMissing', await s.request('fs/watchMissing', { watchId: 'w', missing: [`${workdir}/later`] }));
  await s.request('fs/writeFile', { path: `${workdir}/later`, dataBase64: b64('') });
  await s.waitFor((all) => all.some((n) => n.method.startsWith('fs/')), 20_000, 'a watch notification');
  live['notification fs/*'] = shape(s.notifications.filter((n) => n.method.startsWith('fs/')));
  record('fs/unwatch', await s.request('fs/unwatch', { watchId: 'w' }));

  // ---- HTTP ----
  const http = async (
    name: string,
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<Record<string, unknown>> => {
    const res = await fetch(`${server.httpUrl}${path}`, {
      method,
      headers: {
        ...(body !== undefined
          ? { 'content-type': typeof body === 'string' ? 'application/octet-stream' : 'application/json' }
          : {}),
        ...headers,
      },
      ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    const json =
      res.headers.get('content-type')?.includes('json') && text !== ''
        ? (JSON.parse(text) as Record<string, unknown>)
        : undefined;
    live[`HTTP ${name}`] = {
      status: res.status,
      body: json === undefined ? (text === '' ? 'empty' : 'text') : shape(json),
    };
    return json ?? {};
  };
  const created = await http('create session', 'POST', '/v1/sessions', {});
  const id = String(created['sessionId']);
  const hw = String(created['workdir']);
  await http('list sessions', 'GET', '/v1/sessions');
  await http('get session', 'GET', `/v1/sessions/${id}`);
  await http('unknown session', 'GET', '/v1/sessions/missing');
  await http('invalid body', 'POST', '/v1/sessions', { bogus: 1 });
  await http('body too large', 'POST', '/v1/sessions', { labels: { a: 'x'.repeat(70_000) } });
  await http('unknown route', 'GET', '/v1/nothing');
  await http('exec_command (exited)', 'POST', `/v1/sessions/${id}/exec_command`, {
    cmd: 'echo hi',
    yield_time_ms: 5000,
  });
  const running = await http('exec_command (running)', 'POST', `/v1/sessions/${id}/exec_command`, {
    cmd: 'read x; echo got $x',
    tty: true,
    yield_time_ms: 250,
  });
  await http('write_stdin', 'POST', `/v1/sessions/${id}/write_stdin`, {
    session_id: running['session_id'],
    chars: 'y\n',
    yield_time_ms: 5000,
  });
  await http('write_stdin (unknown)', 'POST', `/v1/sessions/${id}/write_stdin`, { session_id: 1, chars: '' });
  await http('approvals', 'GET', `/v1/sessions/${id}/approvals`);
  await http('tool call (ignored)', 'POST', `/v1/sessions/${id}/tool-calls`, { type: 'message' });
  await http('tool call (no call_id)', 'POST', `/v1/sessions/${id}/tool-calls`, {
    type: 'function_call',
    name: 'exec_command',
  });
  await http('tool call (wrong payload)', 'POST', `/v1/sessions/${id}/tool-calls`, {
    type: 'custom_tool_call',
    name: 'exec_command',
    call_id: 'c0',
    input: 'x',
  });
  await http('tool call', 'POST', `/v1/sessions/${id}/tool-calls`, {
    type: 'function_call',
    name: 'exec_command',
    call_id: 'c1',
    arguments: JSON.stringify({ cmd: 'echo tool' }),
  });
  await http('tool call (unknown tool)', 'POST', `/v1/sessions/${id}/tool-calls`, {
    type: 'function_call',
    name: 'nope',
    call_id: 'c2',
    arguments: '{}',
  });
  await http('upload', 'PUT', `/v1/sessions/${id}/files/content?path=${encodeURIComponent(`${hw}/u.txt`)}`, 'uploaded');
  await http('download', 'GET', `/v1/sessions/${id}/files/content?path=${encodeURIComponent(`${hw}/u.txt`)}`);
  await http('metadata', 'GET', `/v1/sessions/${id}/files/metadata?path=${encodeURIComponent(`${hw}/u.txt`)}`);
  await http('list', 'GET', `/v1/sessions/${id}/files/list?path=${encodeURIComponent(hw)}`);
  await http('canonical', 'GET', `/v1/sessions/${id}/files/canonical?path=${encodeURIComponent(hw)}`);
  await http('mkdir', 'POST', `/v1/sessions/${id}/files/mkdir`, { path: `${hw}/m` });
  await http('copy', 'POST', `/v1/sessions/${id}/files/copy`, {
    sourcePath: `${hw}/u.txt`,
    destinationPath: `${hw}/v.txt`,
  });
  await http('remove', 'DELETE', `/v1/sessions/${id}/files?path=${encodeURIComponent(`${hw}/v.txt`)}`);
  await http('file not found', 'GET', `/v1/sessions/${id}/files/metadata?path=${encodeURIComponent(`${hw}/missing`)}`);
  await http('snapshot (local backend)', 'POST', `/v1/sessions/${id}/snapshots`, {});
  await http('list snapshots', 'GET', '/v1/snapshots');
  await http('image pulls (none in flight)', 'GET', '/v1/images/pulls');
  await http('delete session', 'DELETE', `/v1/sessions/${id}`);
  await http('healthz', 'GET', '/healthz');
  await http('readyz', 'GET', '/readyz');

  const openapi = JSON.parse(
    JSON.stringify(await (await fetch(`${server.httpUrl}/docs/openapi.json`)).json()),
  ) as Record<string, unknown>;
  const actual = { rpcMethods: methodSchemas(), live, openapi };

  if (process.env['UPDATE_WIRE_SNAPSHOT'] === '1') {
    writeFileSync(SNAPSHOT, `${JSON.stringify(actual, null, 1)}\n`);
    t.diagnostic('wire-snapshot.json written');
  }
  for (const n of s.notifications) conforms(n.method, n.params);
  assert.deepEqual(mismatches, [], 'answers that do not match their protocol schema');
  const expected = JSON.parse(readFileSync(SNAPSHOT, 'utf8')) as typeof actual;
  assert.deepEqual(actual.rpcMethods, expected.rpcMethods, 'JSON-RPC params schemas changed');
  assert.deepEqual(actual.live, expected.live, 'answer or notification shapes changed');
  assert.deepEqual(actual.openapi, expected.openapi, 'the OpenAPI document changed');
});
