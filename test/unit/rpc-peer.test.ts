/**
 * The JSON-RPC peer (src/rpc/rpc-peer.ts) over a recording transport, with a real method table:
 * Codex's framing rules, batches, gating, notifications, server requests, output frames.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { execError } from '../../src/errors.ts';
import { silentLogger } from '../../src/logger.ts';
import { Metrics } from '../../src/metrics.ts';
import { decodeBinaryOutput } from '../../src/protocol/index.ts';
import { MethodTable } from '../../src/rpc/method-table.ts';
import { RpcPeer } from '../../src/rpc/rpc-peer.ts';

function setup(opts: { maxBatch?: number; initialized?: boolean } = {}) {
  const sent: unknown[] = [];
  const binary: Buffer[] = [];
  const notes: Array<[string, unknown]> = [];
  const table = new MethodTable<null>()
    .add('initialize', () => ({}) as never, 'none')
    .add('process/signal', (p) => {
      if (p.processId === 'boom') throw new Error('handler bug');
      if (p.processId === 'gone') throw execError('EXEC_ERR_PROCESS_NOT_FOUND', 'no process gone');
      return {};
    });
  const peer = new RpcPeer<null>({
    table,
    ctx: null,
    transport: {
      send: (t, done) => {
        sent.push(JSON.parse(t.toString()));
        done?.();
      },
      sendBinary: (f, done) => {
        binary.push(Buffer.from(f));
        done?.();
      },
    },
    log: silentLogger,
    metrics: new Metrics(),
    gate: (method, requires) => {
      if (requires === 'initialized' && !opts.initialized)
        throw execError('EXEC_ERR_NOT_INITIALIZED', `${method} before initialize`);
    },
    onNotification: (m, p) => notes.push([m, p]),
    ...(opts.maxBatch === undefined ? {} : { maxBatch: opts.maxBatch }),
  });
  return { peer, sent, binary, notes };
}
const signal = (id: unknown, processId = 'p1') => ({
  id,
  method: 'process/signal',
  params: { processId, signal: 'SIGINT' },
});

test('requests are answered by id; "jsonrpc" is echoed only once the client sent it at initialize', async () => {
  const { peer, sent } = setup({ initialized: true });
  peer.handleFrame(JSON.stringify(signal(1)));
  await nextTurn();
  assert.deepEqual(sent, [{ id: 1, result: {} }]);
  peer.handleFrame(
    JSON.stringify({ jsonrpc: '2.0', id: 'i', method: 'initialize', params: { clientName: 'c', binaryOutput: true } }),
  );
  await nextTurn();
  assert.equal(peer.tagReplies, true);
  assert.equal(peer.binaryOutput, true);
  assert.equal((sent[1] as unknown as { jsonrpc: string }).jsonrpc, '2.0');
});

test('bad frames: invalid JSON, non-objects, bad ids and unknown methods each get their error', async () => {
  const { peer, sent } = setup({ initialized: true });
  for (const frame of ['{nope', '42', '{"id":{},"method":"x"}', '{"id":3}', '{"id":4,"method":"no/such"}'])
    peer.handleFrame(frame);
  await nextTurn();
  const errors = sent.map((m) => {
    const { id, error } = m as { id: unknown; error: { code: number; data: { code: string } } };
    return [id, error.code, error.data.code];
  });
  assert.deepEqual(errors, [
    [null, -32700, 'EXEC_ERR_PARSE'],
    [null, -32600, 'EXEC_ERR_INVALID_REQUEST'],
    [null, -32600, 'EXEC_ERR_INVALID_REQUEST'],
    [3, -32600, 'EXEC_ERR_INVALID_REQUEST'],
    [4, -32601, 'EXEC_ERR_METHOD_NOT_FOUND'],
  ]);
});

test('the gate, the handler errors (ours kept, others internal) and params validation all answer errors', async () => {
  const gated = setup();
  gated.peer.handleFrame(JSON.stringify(signal(1)));
  await nextTurn();
  assert.equal((gated.sent[0] as { error: { data: { code: string } } }).error.data.code, 'EXEC_ERR_NOT_INITIALIZED');
  const { peer, sent } = setup({ initialized: true });
  peer.handleFrame(JSON.stringify(signal(2, 'gone')));
  peer.handleFrame(JSON.stringify(signal(3, 'boom')));
  peer.handleFrame(JSON.stringify({ id: 4, method: 'process/signal', params: { processId: 'p' } }));
  await nextTurn();
  const codes = sent.map((m) => (m as { error: { data: { code: string } } }).error.data.code);
  assert.deepEqual(codes, ['EXEC_ERR_PROCESS_NOT_FOUND', 'EXEC_ERR_INTERNAL', 'EXEC_ERR_INVALID_PARAMS']);
});

test('notifications go to the callback and are not answered', async () => {
  const { peer, sent, notes } = setup();
  peer.handleFrame(JSON.stringify({ method: 'initialized', params: { a: 1 } }));
  await nextTurn();
  assert.deepEqual(notes, [['initialized', { a: 1 }]]);
  assert.deepEqual(sent, []);
});

test('a batch is answered as one array (notifications left out); empty and oversized batches are refused', async () => {
  const { peer, sent, notes } = setup({ initialized: true, maxBatch: 3 });
  peer.handleFrame(JSON.stringify([signal(1), { method: 'n' }, signal(2, 'gone')]));
  await nextTurn();
  await nextTurn();
  const batch = sent[0] as Array<{ id: number }>;
  assert.deepEqual(
    batch.map((r) => r.id),
    [1, 2],
  );
  assert.equal(notes.length, 1);
  peer.handleFrame('[]');
  peer.handleFrame(JSON.stringify([1, 2, 3, 4]));
  await nextTurn();
  assert.match(JSON.stringify(sent.slice(1)), /empty batch.*batch of 4 exceeds 3/);
});

test('server requests: answered, error-answered, timed out, and failed on close', async () => {
  const { peer, sent } = setup();
  const answered = peer.request('approval/request', { x: 1 }, 1000);
  const refused = peer.request('approval/request', {}, 1000);
  const [first, second] = sent as Array<{ id: string; method: string }>;
  assert.equal(first?.method, 'approval/request');
  peer.handleFrame(JSON.stringify({ id: first?.id, result: { decision: 'approved' } }));
  peer.handleFrame(JSON.stringify({ id: second?.id, error: { code: 1, message: 'no' } }));
  assert.deepEqual(await answered, { decision: 'approved' });
  await assert.rejects(refused, /client answered with an error/);
  await assert.rejects(peer.request('x', {}, 10), /no answer to x within 10 ms/);
  const pending = peer.request('y', {}, 10_000);
  peer.close();
  await assert.rejects(pending, /connection closed/);
  await assert.rejects(peer.request('z', {}, 10), /connection closed/);
  assert.equal(peer.closed, true);
});

test('output notifications: base64 JSON by default, binary frames once asked for; nothing after close', () => {
  const { peer, sent, binary } = setup();
  const data = Buffer.from([0, 1, 2, 250, 251, 252, 10]);
  peer.notifyOutput('proc-"1"', 7, 'stderr', data);
  assert.deepEqual(sent[0], {
    method: 'process/output',
    params: { processId: 'proc-"1"', seq: 7, stream: 'stderr', chunk: data.toString('base64') },
  });
  peer.binaryOutput = true;
  peer.notifyOutput('p2', 8, 'pty', data);
  const decoded = decodeBinaryOutput(binary[0] as Buffer);
  assert.ok(typeof decoded !== 'string');
  assert.deepEqual([decoded.processId, decoded.seq, decoded.stream, [...decoded.data]], ['p2', 8, 'pty', [...data]]);
  peer.notify('process/closed', { processId: 'p2', seq: 10 });
  peer.close();
  peer.notifyOutput('p2', 9, 'pty', data);
  peer.notify('process/closed', { processId: 'late', seq: 11 });
  assert.equal(binary.length, 1);
  assert.deepEqual(sent.at(-1), { method: 'process/closed', params: { processId: 'p2', seq: 10 } });
});
