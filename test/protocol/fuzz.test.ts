/**
 * A small fuzzer: 10 000 random or mutated messages over one connection. Every message that
 * carries an id (or is not valid JSON) must get exactly one answer, the connection must stay
 * open, and the server must still work afterwards. Commands are never fuzzed into argv: a
 * mutated process/start either fails validation or runs `true`.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import WebSocket from 'ws';
import { startServer, TestSession } from '../support/harness.ts';
import { rng } from '../support/rng.ts';

const METHODS = [
  'initialize',
  'process/start',
  'process/read',
  'process/write',
  'process/signal',
  'process/terminate',
  'process/resize',
  'process/closeStdin',
  'process/list',
  'session/info',
  'environment/info',
  'fs/readFile',
  'fs/getMetadata',
  'fs/readDirectory',
  'bogus/method',
  '',
];

function junk(r: () => number, depth = 0): unknown {
  const k = Math.floor(r() * 10);
  switch (k) {
    case 0:
      return null;
    case 1:
      return r() < 0.5;
    case 2:
      return Math.floor(r() * 2 ** 53) * (r() < 0.5 ? -1 : 1);
    case 3:
      return r() * 1e308;
    case 4:
      return 'x'.repeat(Math.floor(r() * 200));
    case 5:
      return String.fromCharCode(...Array.from({ length: 8 }, () => Math.floor(r() * 0xffff)));
    case 6:
      return depth > 3 ? [] : Array.from({ length: Math.floor(r() * 4) }, () => junk(r, depth + 1));
    case 7:
      return depth > 3
        ? {}
        : Object.fromEntries(Array.from({ length: Math.floor(r() * 4) }, (_, i) => [`k${i}`, junk(r, depth + 1)]));
    case 8:
      return '__proto__';
    default:
      return -1;
  }
}

function validParams(method: string): Record<string, unknown> {
  switch (method) {
    case 'process/start':
      return { processId: 'fz', argv: ['true'], tty: false };
    case 'process/write':
      return { processId: 'fz', chunk: 'aGk=' };
    case 'process/signal':
      return { processId: 'fz', signal: 'interrupt' };
    case 'process/resize':
      return { processId: 'fz', cols: 80, rows: 24 };
    case 'fs/readFile':
    case 'fs/getMetadata':
    case 'fs/readDirectory':
      return { path: '/nonexistent-fuzz' };
    case 'initialize':
      return { clientName: 'fuzz' };
    default:
      return { processId: 'fz' };
  }
}

function mutate(r: () => number, id: number): string | undefined {
  const method = METHODS[Math.floor(r() * METHODS.length)] ?? '';
  const params: Record<string, unknown> = validParams(method);
  const roll = r();
  if (roll < 0.1) return `{"id":${id},"method":${'"'.repeat(Math.floor(r() * 3))}`; // truncated JSON
  if (roll < 0.15) return String.fromCharCode(...Array.from({ length: 20 }, () => 32 + Math.floor(r() * 90)));
  for (const key of Object.keys(params)) {
    const p = r();
    if (p < 0.2) delete params[key];
    else if (p < 0.45 && key !== 'argv') params[key] = junk(r);
  }
  if (r() < 0.3) params[`extra${Math.floor(r() * 3)}`] = junk(r);
  const message: Record<string, unknown> = { id, method, params: r() < 0.05 ? junk(r) : params };
  if (r() < 0.05) message['method'] = junk(r);
  if (r() < 0.1) message['jsonrpc'] = r() < 0.5 ? '2.0' : junk(r);
  if (
    method === 'process/start' &&
    typeof (message['params'] as Record<string, unknown> | null)?.['argv'] !== 'undefined'
  ) {
    (message['params'] as Record<string, unknown>)['argv'] = ['true'];
  }
  return JSON.stringify(message);
}

test('10 000 fuzzed messages: each answered, connection kept, server still serving', {
  timeout: 180_000,
}, async (t) => {
  const server = await startServer({ flags: ['--exited-retention-ms', '0'] });
  t.after(() => server.close());
  const ws = new WebSocket(server.url);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  const answers = new Map<unknown, number>();
  let nullIdAnswers = 0;
  let received = 0;
  ws.on('message', (d) => {
    const parsed = JSON.parse(String(d)) as unknown;
    for (const m of Array.isArray(parsed) ? parsed : [parsed]) {
      const msg = m as Record<string, unknown>;
      if (!('result' in msg) && !('error' in msg)) continue; // notifications
      received++;
      if (msg['id'] === null) nullIdAnswers++;
      else answers.set(msg['id'], (answers.get(msg['id']) ?? 0) + 1);
    }
  });
  ws.send(JSON.stringify({ id: 0, method: 'initialize', params: { clientName: 'fuzz' } }));
  ws.send(JSON.stringify({ method: 'initialized' }));
  const r = rng(20261130);
  let expectedWithId = 1;
  let expectedNull = 0;
  for (let i = 1; i <= 10_000; i++) {
    const text = mutate(r, i) ?? '';
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    // Objects carry their numeric id (answered with it even when the method is junk); anything else is answered with id null.
    if (parsed === undefined || typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) expectedNull++;
    else expectedWithId++;
    ws.send(text);
    if (i % 500 === 0) await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const deadline = Date.now() + 60_000;
  while (received < expectedWithId + expectedNull && Date.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(nullIdAnswers, expectedNull, 'every unparseable or invalid message answered with id null');
  assert.equal(answers.size, expectedWithId, 'every request with an id answered');
  assert.ok(
    [...answers.values()].every((n) => n === 1),
    'no request answered twice',
  );
  assert.equal(ws.readyState, WebSocket.OPEN);
  ws.close();
  const after = await TestSession.open(server.url);
  t.after(() => after.close());
  const res = await after.run('alive', ['sh', '-c', 'echo still-serving']);
  assert.equal(res.stdout, 'still-serving\n');
});
