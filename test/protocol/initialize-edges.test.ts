/**
 * An `initialize` that fails leaves the connection's framing as it was (src/rpc/rpc-peer.ts):
 * neither a refused second `initialize` nor one with bad params or an unknown session turns on
 * binary output frames or the `"jsonrpc"` echo it asked for; the `initialize` that succeeds
 * decides them. Against a real server, over a raw WebSocket.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import WebSocket from 'ws';
import { startServer } from '../support/harness.ts';

interface RawClient {
  /** Every text frame, parsed, in order. */
  readonly messages: Array<Record<string, unknown>>;
  /** How many binary frames arrived. */
  binaryFrames: number;
  /** Sends `message` as it is and waits for the answer of its id. */
  call(message: Record<string, unknown>): Promise<Record<string, unknown>>;
  /** Waits for the first text frame `pred` accepts. */
  next(pred: (m: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
  readonly ws: WebSocket;
}

async function rawClient(t: TestContext, url: string): Promise<RawClient> {
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  t.after(() => ws.close());
  const waiters: Array<{
    pred: (m: Record<string, unknown>) => boolean;
    resolve: (m: Record<string, unknown>) => void;
  }> = [];
  const c: RawClient = {
    messages: [],
    binaryFrames: 0,
    ws,
    next: (pred) =>
      new Promise((resolve) => {
        const seen = c.messages.find(pred);
        if (seen) resolve(seen);
        else waiters.push({ pred, resolve });
      }),
    call: (message) => {
      ws.send(JSON.stringify(message));
      return c.next((m) => m['id'] === message['id'] && !('method' in m));
    },
  };
  ws.on('message', (data: Buffer, isBinary) => {
    if (isBinary) {
      c.binaryFrames++;
      return;
    }
    const parsed = JSON.parse(String(data)) as Record<string, unknown> | Array<Record<string, unknown>>;
    for (const m of Array.isArray(parsed) ? parsed : [parsed]) {
      c.messages.push(m);
      for (const w of [...waiters])
        if (w.pred(m)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(m);
        }
    }
  });
  return c;
}

const errorCode = (answer: Record<string, unknown>): unknown =>
  (answer['error'] as { data?: { code?: unknown } } | undefined)?.data?.code;

/** Runs `printf hello` and waits for its end: the output frames it got are the client's framing. */
async function runHello(c: RawClient, id: number): Promise<void> {
  const start = await c.call({
    id,
    method: 'process/start',
    params: { processId: `p${id}`, argv: ['printf', 'hello'] },
  });
  assert.equal(start['error'], undefined, JSON.stringify(start));
  await c.next((m) => m['method'] === 'process/closed');
}

function jsonOutput(c: RawClient): string {
  return c.messages
    .filter((m) => m['method'] === 'process/output')
    .map((m) => Buffer.from(String((m['params'] as { chunk: string }).chunk), 'base64').toString())
    .join('');
}

test('a second initialize asking for binary output is refused and output stays JSON', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const c = await rawClient(t, server.url);
  const first = await c.call({ id: 1, method: 'initialize', params: { clientName: 'edges' } });
  assert.equal(typeof (first['result'] as { sessionId?: unknown }).sessionId, 'string');
  c.ws.send(JSON.stringify({ method: 'initialized' }));
  const again = await c.call({
    jsonrpc: '2.0',
    id: 2,
    method: 'initialize',
    params: { clientName: 'edges', binaryOutput: true },
  });
  assert.equal(errorCode(again), 'EXEC_ERR_ALREADY_INITIALIZED');
  const bad = await c.call({
    jsonrpc: '2.0',
    id: 3,
    method: 'initialize',
    params: { clientName: 5, binaryOutput: true },
  });
  assert.equal(errorCode(bad), 'EXEC_ERR_ALREADY_INITIALIZED');
  await runHello(c, 4);
  assert.equal(c.binaryFrames, 0, 'no binary frame to a client whose initialize did not ask for them');
  assert.equal(jsonOutput(c), 'hello');
  const tagged = c.messages.filter((m) => 'jsonrpc' in m && m['id'] !== 2 && m['id'] !== 3);
  assert.deepEqual(tagged, [], 'no "jsonrpc" echo: the initialize that succeeded did not send it');
});

test('a first initialize that fails (bad params, unknown session) does not decide the framing of the next', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const c = await rawClient(t, server.url);
  const bad = await c.call({
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { clientName: 5, binaryOutput: true },
  });
  assert.equal(errorCode(bad), 'EXEC_ERR_INVALID_PARAMS');
  assert.equal(bad['jsonrpc'], '2.0', 'the answer to a request that carried "jsonrpc" echoes it');
  const unknown = await c.call({
    jsonrpc: '2.0',
    id: 2,
    method: 'initialize',
    params: { clientName: 'edges', binaryOutput: true, resumeSessionId: 'no-such-session' },
  });
  assert.equal(errorCode(unknown), 'EXEC_ERR_SESSION_NOT_FOUND');
  const ok = await c.call({ id: 3, method: 'initialize', params: { clientName: 'edges' } });
  assert.equal(ok['jsonrpc'], undefined, 'the successful initialize did not send "jsonrpc"');
  assert.equal(typeof (ok['result'] as { sessionId?: unknown }).sessionId, 'string');
  c.ws.send(JSON.stringify({ method: 'initialized' }));
  await runHello(c, 4);
  assert.equal(c.binaryFrames, 0);
  assert.equal(jsonOutput(c), 'hello');
  assert.deepEqual(
    c.messages.filter((m) => 'jsonrpc' in m && m['id'] !== 1 && m['id'] !== 2),
    [],
  );
});

test('the initialize that succeeds after a failed one gets the framing it asks for', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const c = await rawClient(t, server.url);
  const bad = await c.call({ id: 1, method: 'initialize', params: { clientName: 5 } });
  assert.equal(errorCode(bad), 'EXEC_ERR_INVALID_PARAMS');
  const ok = await c.call({
    jsonrpc: '2.0',
    id: 2,
    method: 'initialize',
    params: { clientName: 'edges', binaryOutput: true },
  });
  assert.equal(ok['jsonrpc'], '2.0');
  c.ws.send(JSON.stringify({ method: 'initialized' }));
  await runHello(c, 3);
  assert.ok(c.binaryFrames > 0, 'output as binary frames');
  assert.equal(jsonOutput(c), '');
});

test('in one batch, an initialize that fails does not undo the framing of the one admitted after it', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const c = await rawClient(t, server.url);
  c.ws.send(
    JSON.stringify([
      { id: 1, method: 'initialize', params: { clientName: 5 } },
      { id: 2, method: 'initialize', params: { clientName: 'edges', binaryOutput: true } },
    ]),
  );
  assert.equal(errorCode(await c.next((m) => m['id'] === 1)), 'EXEC_ERR_INVALID_PARAMS');
  const ok = await c.next((m) => m['id'] === 2);
  assert.equal(typeof (ok['result'] as { sessionId?: unknown }).sessionId, 'string', JSON.stringify(ok));
  c.ws.send(JSON.stringify({ method: 'initialized' }));
  await runHello(c, 3);
  assert.ok(c.binaryFrames > 0, 'output as binary frames, as the successful initialize asked');
  assert.equal(jsonOutput(c), '');
});
