/**
 * The server under faults (docs/reliability.md, cases S1-S4): a disconnect storm, the engine
 * going away mid-stream, fuzzed JSON-RPC and HTTP with the heap back to its level, and another
 * tenant trying every route the OpenAPI document lists.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { buildApp } from '../../src/app.ts';
import { ExecServerClient } from '../../src/client/index.ts';
import { loadConfig } from '../../src/config.ts';
import { dockerTestOptions } from '../docker/engine.ts';
import { makeBackend } from '../docker/helpers.ts';
import { EngineProxy } from '../docker/socket-proxy.ts';
import { startServer, TestSession } from '../support/harness.ts';
import { rng } from '../support/rng.ts';

test('S1 disconnect storm: 20 clients streaming 5 MB, cut every 200 ms and resumed: every byte once, in order', {
  timeout: 900_000,
}, async (t) => {
  const server = await startServer({ flags: ['--output-retention-bytes', String(8 * 1024 * 1024)] });
  t.after(() => server.close());
  const LINES = Number(process.env['STORM_LINES'] ?? 700_000); // `seq 1 700000` is 4.9 MB
  const expected = Array.from({ length: LINES }, (_, i) => `${i + 1}\n`).join('');
  const clients = await Promise.all(
    Array.from({ length: Number(process.env['STORM_CLIENTS'] ?? 20) }, () =>
      ExecServerClient.connect(server.url, { autoReconnect: { attempts: 1000, delayMs: 20 } }),
    ),
  );
  t.after(() => Promise.all(clients.map((c) => c.deleteSession().catch(() => undefined))));
  let cuts = 0;
  const started = performance.now();
  // Started before the storm: a start cut off in flight is the caller's to retry, not a resume.
  const procs = await Promise.all(clients.map((client) => client.exec(['seq', '1', String(LINES)])));
  const runs = procs.map(async (proc) => {
    const seqs: number[] = [];
    proc.onOutput((c) => seqs.push(c.seq));
    return { result: await proc.wait(), seqs };
  });
  const cutter = setInterval(() => {
    for (const c of clients) {
      if (!c.connected) continue;
      c.connection.socket.terminate();
      cuts++;
    }
  }, 200);
  let results: Awaited<(typeof runs)[number]>[];
  try {
    results = await Promise.all(runs);
  } finally {
    clearInterval(cutter);
  }
  const seconds = (performance.now() - started) / 1000;
  for (const [i, { result, seqs }] of results.entries()) {
    assert.equal(
      result.stdout.length,
      expected.length,
      `client ${i}: ${result.stdout.length} of ${expected.length} bytes`,
    );
    assert.ok(result.stdout === expected, `client ${i}: the bytes differ`);
    assert.equal(new Set(seqs).size, seqs.length, `client ${i}: a chunk twice`);
    assert.deepEqual(
      seqs,
      [...seqs].sort((a, b) => a - b),
      `client ${i}: out of order`,
    );
  }
  assert.ok(cuts >= 20, `${cuts} cuts`);
  t.diagnostic(
    `20 x ${(expected.length / 1e6).toFixed(1)} MB through ${cuts} cuts in ${seconds.toFixed(1)} s, every byte once, in order`,
  );
});

test('S2 the engine stops mid-stream: clear errors, /readyz false, nothing hangs; back again: recovery', {
  ...dockerTestOptions,
  timeout: 180_000,
}, async (t) => {
  const proxy = new EngineProxy(`/tmp/exec-server-rel-${randomUUID().slice(0, 8)}.sock`);
  await proxy.start();
  let app: Awaited<ReturnType<typeof buildApp>> | undefined;
  // The server closes (removing its sessions' containers) while the engine is still reachable.
  t.after(async () => {
    await app?.close();
    await proxy.stop();
  });
  const config = loadConfig(['--listen', 'ws://127.0.0.1:0', '--backend', 'docker'], {});
  const backend = makeBackend({ dockerHost: proxy.dockerHost, pingTimeoutMs: 1500 });
  app = await buildApp({ config, backend });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as { port: number }).port;
  const url = `ws://127.0.0.1:${port}`;
  const s = await TestSession.open(url, { session: { sandbox: { type: 'danger-full-access' } } });
  t.after(() => s.close());
  await s.start('stream', ['sh', '-c', 'while :; do echo tick; sleep 0.05; done']);
  await s.waitFor((all) => all.some((n) => n.method === 'process/output'), 20_000);

  await proxy.stop();
  const t0 = performance.now();
  const exited = await s.result('stream', 20_000);
  assert.equal(exited.exited['terminal'], 'lost', 'a stream the engine took with it ends lost');
  const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
  assert.equal(ready.status, 503);
  await assert.rejects(s.start('during', ['true']), (err: Error & { code?: string }) =>
    /EXEC_ERR_BACKEND/.test(err.code ?? ''),
  );
  await assert.rejects(TestSession.open(url, { session: {} }), (err: Error & { code?: string }) =>
    /EXEC_ERR_BACKEND/.test(err.code ?? ''),
  );
  const failMs = performance.now() - t0;
  assert.ok(failMs < 15_000, `the errors took ${failMs.toFixed(0)} ms`);

  await proxy.start();
  const deadline = Date.now() + 30_000;
  while ((await fetch(`http://127.0.0.1:${port}/readyz`)).status !== 200 && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 200));
  assert.equal((await fetch(`http://127.0.0.1:${port}/readyz`)).status, 200, '/readyz recovers');
  const fresh = await TestSession.open(url, { session: {} });
  t.after(() => fresh.close());
  assert.equal((await fresh.run('after', ['echo', 'back'])).stdout, 'back\n');
  t.diagnostic(
    `lost, 503 and clear errors within ${failMs.toFixed(0)} ms of the engine going away; a new session ran after it came back`,
  );
});

/** Collects garbage (the runner's node has no --expose-gc) and returns the heap in use. */
function settledHeap(): number {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

test('S3 fuzzed JSON-RPC frames and HTTP bodies: no crash, every request answered, the heap back to its level', {
  timeout: 300_000,
}, async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const s = await TestSession.open(server.url, { session: { sandbox: { type: 'workspace-write' } } });
  t.after(() => s.close());
  const r = rng(Number(process.env['FUZZ_SEED'] ?? 14));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const noise = (n: number): string =>
    Array.from({ length: n }, () => String.fromCharCode(Math.floor(r() * 0x3000))).join('');
  const shapes = [
    () => noise(Math.floor(r() * 200)),
    () =>
      JSON.stringify({
        id: Math.floor(r() * 1e6),
        method: pick(['process/start', 'fs/readFile', 'process/read', 'session/info', 'x']),
        params: pick([null, 1, 'x', [], { argv: 'x' }, { path: noise(20) }, { processId: noise(5), argv: [] }]),
      }),
    () => `{"id":1,"method":"session/info","params":${'['.repeat(Math.floor(r() * 5000))}`,
    () => JSON.stringify({ id: 'a'.repeat(Math.floor(r() * 10_000)), method: 'session/info' }),
  ];
  const round = async (count: number): Promise<void> => {
    const { default: WebSocket } = await import('ws');
    const ws = new WebSocket(server.url);
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    ws.on('error', () => undefined);
    for (let i = 0; i < count; i++) ws.send(pick(shapes)());
    ws.close();
    await new Promise((resolve) => ws.once('close', resolve));
    const routes = [
      '/v1/sessions',
      `/v1/sessions/${s.sessionId}/exec_command`,
      `/v1/sessions/${s.sessionId}/files`,
      '/v1/sessions/x/write_stdin',
    ];
    for (let i = 0; i < count / 10; i++) {
      const method = pick(['POST', 'PUT', 'GET', 'DELETE']);
      const body = method === 'POST' || method === 'PUT' ? noise(Math.floor(r() * 2000)) : undefined;
      const res = await fetch(`${server.httpUrl}${pick(routes)}`, {
        method,
        headers: { 'content-type': pick(['application/json', 'text/plain', 'application/octet-stream']) },
        body,
      }).catch(() => undefined);
      await res?.arrayBuffer().catch(() => undefined);
      assert.ok(!res || res.status < 500 || res.status === 501 || res.status === 502, `HTTP ${res?.status}`);
    }
  };
  await round(500); // warm up: what stays allocated after the first use is not a leak
  const before = settledHeap();
  for (let i = 0; i < 8; i++) await round(2500);
  const after = settledHeap();
  assert.equal((await s.run('alive', ['echo', 'still'])).stdout, 'still\n');
  const grew = (after - before) / 1024 / 1024;
  assert.ok(grew < 16, `the heap grew by ${grew.toFixed(1)} MiB over 20 000 fuzzed frames and 2 000 HTTP requests`);
  t.diagnostic(
    `heap ${(before / 1048576).toFixed(1)} -> ${(after / 1048576).toFixed(1)} MiB after 20 000 frames and 2 000 HTTP requests`,
  );
});

test('S4 another tenant, on every route with a session in it: the answer of a session that never existed, and no effect', {
  timeout: 120_000,
}, async (t) => {
  const server = await startServer({ flags: ['--tokens', 'alice:TA,bob:TB'] });
  t.after(() => server.close());
  const alice = await TestSession.open(
    server.url,
    { session: { sandbox: { type: 'workspace-write' } } },
    { token: 'TA' },
  );
  t.after(() => alice.close());
  await alice.run('mark', ['sh', '-c', 'echo mine > owned.txt']);
  const doc = (await (
    await fetch(`${server.httpUrl}/docs/openapi.json`, { headers: { authorization: 'Bearer TA' } })
  ).json()) as { paths: Record<string, Record<string, unknown>> };
  const nobody = randomUUID();
  let tried = 0;
  for (const [path, methods] of Object.entries(doc.paths)) {
    if (!/\{(id|sessionId)\}/.test(path)) continue;
    for (const method of Object.keys(methods)) {
      if (!['get', 'post', 'put', 'delete', 'patch'].includes(method)) continue;
      const concrete = (id: string): string => path.replace(/\{(id|sessionId)\}/, id).replace(/\{[^}]+\}/g, '1');
      const ask = async (id: string): Promise<{ status: number; code: unknown }> => {
        const res = await fetch(`${server.httpUrl}${concrete(id)}`, {
          method: method.toUpperCase(),
          headers: {
            authorization: 'Bearer TB',
            ...(method === 'get' || method === 'delete' ? {} : { 'content-type': 'application/json' }),
          },
          ...(method === 'get' || method === 'delete'
            ? {}
            : { body: JSON.stringify({ cmd: 'touch /tmp/pwned', path: '/tmp/pwned', dataBase64: 'eA==' }) }),
        });
        const text = await res.text();
        let code: unknown;
        try {
          code = (JSON.parse(text) as { code?: unknown }).code;
        } catch {
          code = undefined;
        }
        return { status: res.status, code };
      };
      const theirs = await ask(alice.sessionId);
      const none = await ask(nobody);
      assert.deepEqual(
        theirs,
        none,
        `${method.toUpperCase()} ${path}: bob sees alice's session differently from none at all`,
      );
      assert.ok(theirs.status >= 400, `${method.toUpperCase()} ${path}: ${theirs.status}`);
      tried++;
    }
  }
  assert.ok(tried >= 10, `${tried} routes tried`);
  // Alice's session is intact and still hers.
  const r = await alice.run('check', ['sh', '-c', 'cat owned.txt; ls /tmp/pwned 2>/dev/null || echo untouched']);
  assert.equal(r.stdout, 'mine\nuntouched\n');
  t.diagnostic(`${tried} routes answered bob exactly as for a session that does not exist`);
});
