/**
 * Binary output frames (src/protocol/binary-output.ts, docs/protocol.md): the layout round-trips
 * and refuses what is not one, and a client that asks for them at `initialize` gets every byte
 * of a stream once, in order, in binary frames, while `process/read` and a client that did not
 * ask get the same output as JSON, with the same seqs.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import WebSocket from 'ws';
import { binaryOutputBytes, decodeBinaryOutput, encodeBinaryOutput } from '../../src/protocol/index.ts';
import { BACKENDS } from '../support/backends.ts';
import { startServer } from '../support/harness.ts';

test('the layout: every field round-trips; short, unknown and cut frames are refused', () => {
  const data = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  for (const stream of ['stdout', 'stderr', 'pty'] as const) {
    const o = { processId: 'proc-é-1', seq: 2 ** 40 + 3, stream, data };
    const frame = Buffer.alloc(binaryOutputBytes(o.processId, data.length));
    encodeBinaryOutput(frame, o);
    const back = decodeBinaryOutput(frame);
    assert.ok(typeof back !== 'string', String(back));
    assert.deepEqual({ ...back, data: Buffer.from(back.data) }, o);
  }
  assert.match(String(decodeBinaryOutput(Buffer.alloc(5))), /too short/);
  assert.match(
    String(decodeBinaryOutput(Buffer.from([9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]))),
    /unknown binary frame kind 9/,
  );
  assert.match(String(decodeBinaryOutput(Buffer.from([1, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]))), /unknown stream 7/);
  assert.match(String(decodeBinaryOutput(Buffer.from([1, 0, 50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 65]))), /cut inside/);
});

interface Received {
  binary: Array<{ seq: number; data: Buffer }>;
  jsonOutput: Array<{ seq: number; data: Buffer }>;
  closed: Promise<void>;
  request(id: number, method: string, params: unknown): Promise<Record<string, unknown>>;
}

/** A raw client: initializes (optionally asking for binary output) and records what arrives. */
async function client(
  url: string,
  binaryOutput: boolean,
  resumeSessionId?: string,
): Promise<Received & { ws: WebSocket; sessionId: string }> {
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  const r: Received & { ws: WebSocket; sessionId: string } = {
    ws,
    sessionId: '',
    binary: [],
    jsonOutput: [],
    closed: Promise.resolve(),
    request: (id, method, params) =>
      new Promise((resolve) => {
        waiters.set(id, resolve);
        ws.send(JSON.stringify({ id, method, params }));
      }),
  };
  const waiters = new Map<number, (m: Record<string, unknown>) => void>();
  let closedResolve: () => void = () => {};
  r.closed = new Promise((res) => (closedResolve = res));
  ws.on('message', (d: Buffer, isBinary) => {
    if (isBinary) {
      const o = decodeBinaryOutput(d);
      assert.ok(typeof o !== 'string', String(o));
      r.binary.push({ seq: o.seq, data: Buffer.from(o.data) });
      return;
    }
    const m = JSON.parse(String(d)) as Record<string, unknown>;
    const params = (m['params'] ?? {}) as Record<string, unknown>;
    if (m['method'] === 'process/output')
      r.jsonOutput.push({ seq: Number(params['seq']), data: Buffer.from(String(params['chunk']), 'base64') });
    if (m['method'] === 'process/closed') closedResolve();
    if (typeof m['id'] === 'number') waiters.get(m['id'])?.(m);
  });
  const init = await r.request(1, 'initialize', {
    clientName: 'binary-test',
    ...(binaryOutput ? { binaryOutput: true } : {}),
    ...(resumeSessionId ? { resumeSessionId } : { session: { sandbox: { type: 'danger-full-access' } } }),
  });
  const result = init['result'] as { sessionId: string; capabilities: Record<string, boolean> };
  assert.equal(result.capabilities['binaryOutput'], true);
  r.sessionId = result.sessionId;
  ws.send(JSON.stringify({ method: 'initialized', params: {} }));
  return r;
}

for (const backend of BACKENDS) {
  describe(`binary output frames [${backend}]`, { timeout: 120_000 }, () => {
    test('asked for: every byte once and in order as binary frames; process/read gives the same as JSON', async (t) => {
      const server = await startServer({ backend });
      t.after(() => server.close());
      const c = await client(server.url, true);
      t.after(() => c.ws.close());
      // Every byte value, 1 MiB of them, on stdout; a line on stderr.
      await c.request(2, 'process/start', {
        processId: 'bytes',
        argv: [
          'sh',
          '-c',
          "i=0; while [ $i -lt 4096 ]; do printf '\\000\\001\\177\\200\\377abc'; i=$((i+1)); done; echo err >&2",
        ],
      });
      await c.closed;
      assert.deepEqual(c.jsonOutput, [], 'no output as JSON to a client that asked for binary');
      const seqs = c.binary.map((b) => b.seq);
      assert.deepEqual(
        seqs,
        [...seqs].sort((a, b) => a - b),
      );
      const all = Buffer.concat(c.binary.map((b) => b.data));
      assert.equal(all.length, 4096 * 8 + 4);
      assert.ok(all.includes(Buffer.from('\x00\x01\x7f\x80\xffabc', 'latin1')));
      const read = await c.request(3, 'process/read', { processId: 'bytes', afterSeq: 0 });
      const chunks = (read['result'] as { chunks: Array<{ seq: number; chunk: string }> }).chunks;
      assert.deepEqual(
        chunks.map((ch) => ch.seq),
        seqs,
      );
      assert.deepEqual(Buffer.concat(chunks.map((ch) => Buffer.from(ch.chunk, 'base64'))), all);
    });

    test('not asked for: the same stream as JSON text frames only', async (t) => {
      const server = await startServer({ backend });
      t.after(() => server.close());
      const c = await client(server.url, false);
      t.after(() => c.ws.close());
      await c.request(2, 'process/start', { processId: 'p', argv: ['sh', '-c', 'printf hello; printf world >&2'] });
      await c.closed;
      assert.deepEqual(c.binary, []);
      assert.deepEqual(
        Buffer.concat(c.jsonOutput.map((o) => o.data))
          .toString()
          .split('')
          .sort(),
        [...'helloworld'].sort(),
      );
    });
  });
}
