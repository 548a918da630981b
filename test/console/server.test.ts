/**
 * The server side of the console: its static files and security headers, the bearer token as
 * a WebSocket subprotocol, observer connections (initialize `observe`), and the process list
 * fields the console shows.
 */
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import WebSocket from 'ws';
import { buildApp } from '../../src/app.ts';
import { createLocalBackend } from '../../src/backends/local/local-backend.ts';
import { loadConfig } from '../../src/config.ts';
import { consoleCsp, registerConsole } from '../../src/console/routes.ts';
import { bearerFromProtocols, selectProtocol } from '../../src/console/websocket-token.ts';
import { silentLogger } from '../../src/logger.ts';
import Fastify from 'fastify';
import { DEFAULT_TENANT } from '../../src/transport/auth.ts';
import { sleep, startServer, TestSession } from '../support/harness.ts';

const TOKENS = ['--tokens', 'alice:tok-alice,bob:tok-bob'];
const b64url = (s: string): string => Buffer.from(s).toString('base64url');

test('the token subprotocol: parsed, never selected, other protocols left as ws would choose', () => {
  assert.equal(bearerFromProtocols(`exec-server, exec-server.bearer.${b64url('tok é')}`), 'Bearer tok é');
  assert.equal(bearerFromProtocols('exec-server'), undefined);
  assert.equal(bearerFromProtocols('exec-server.bearer.not+base64url'), undefined);
  assert.equal(bearerFromProtocols(`exec-server.bearer.${'A'.repeat(10_000)}`), undefined, 'bounded');
  assert.equal(selectProtocol(new Set(['exec-server.bearer.eA', 'exec-server'])), 'exec-server');
  assert.equal(selectProtocol(new Set(['exec-server.bearer.eA', 'other'])), 'other');
  assert.equal(selectProtocol(new Set(['exec-server.bearer.eA'])), false);
});

test('console files: public, with CSP and frame-ancestors none; the API still needs the token', async (t) => {
  const server = await startServer({ flags: TOKENS });
  t.after(() => server.close());
  const page = await fetch(`${server.httpUrl}/console/`);
  // The build may be absent in a checkout that skipped install scripts; both answers carry the headers.
  assert.ok(page.status === 200 || page.status === 503, `status ${page.status}`);
  const csp = page.headers.get('content-security-policy') ?? '';
  assert.equal(csp, consoleCsp(server.httpUrl));
  // Its own files only: not 'self', which would trust a session's preview paths on this origin.
  assert.match(csp, new RegExp(`script-src ${server.httpUrl}/console/(;|$)`));
  assert.doesNotMatch(csp, /script-src[^;]*'self'/);
  assert.match(csp, /frame-ancestors 'none'/);
  assert.equal(page.headers.get('x-frame-options'), 'DENY');
  assert.equal(page.headers.get('x-content-type-options'), 'nosniff');
  const html = await page.text();
  assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/, 'no inline script');
  const redirect = await fetch(`${server.httpUrl}/console`, { redirect: 'manual' });
  assert.equal(redirect.status, 308);
  assert.equal(redirect.headers.get('location'), '/console/');
  // fetch would normalize the dots away; a raw request sends them as they are.
  for (const path of ['/console/../v1/sessions', '/console/%2e%2e/v1/sessions', '/console/..%2fv1%2fsessions']) {
    assert.equal(await rawStatus(server.httpUrl, path), 404, `no way from the public prefix into the API: ${path}`);
  }
  assert.equal((await fetch(`${server.httpUrl}/console/nothing.js`)).status, 404);
  assert.equal((await fetch(`${server.httpUrl}/v1/sessions`)).status, 401);
});

test('console files are served from memory with etags; a missing build answers 503 with a clear page', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'console-build-'));
  await mkdir(join(dir, 'assets'));
  await writeFile(join(dir, 'index.html'), '<!doctype html><script type="module" src="./assets/console.js"></script>');
  await writeFile(join(dir, 'assets', 'console.js'), 'export {};');
  const app = Fastify();
  registerConsole(app, { dir });
  const missing = Fastify();
  registerConsole(missing, { dir: join(dir, 'absent') });
  t.after(() => Promise.all([app.close(), missing.close()]));
  const js = await app.inject({ url: '/console/assets/console.js' });
  assert.equal(js.statusCode, 200);
  assert.equal(js.headers['content-type'], 'text/javascript; charset=utf-8');
  const again = await app.inject({
    url: '/console/assets/console.js',
    headers: { 'if-none-match': String(js.headers['etag']) },
  });
  assert.equal(again.statusCode, 304);
  const notBuilt = await missing.inject({ url: '/console/' });
  assert.equal(notBuilt.statusCode, 503);
  assert.match(notBuilt.body, /npm run build/);
  assert.equal(notBuilt.headers['content-security-policy'], consoleCsp('http://localhost:80'));
});

function rawStatus(base: string, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(`${base}/`, { path }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.once('error', reject);
    req.end();
  });
}

function openWs(url: string, protocols: string[]): Promise<{ ws: WebSocket; protocol: string } | { status: number }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${url}/v1/ws`, protocols);
    ws.once('open', () => resolve({ ws, protocol: ws.protocol }));
    ws.once('unexpected-response', (_req, res) => resolve({ status: res.statusCode ?? 0 }));
    ws.once('error', reject);
  });
}

test('a browser WebSocket authenticates with the token subprotocol; the server answers exec-server', async (t) => {
  const server = await startServer({ flags: TOKENS });
  t.after(() => server.close());
  const ok = await openWs(server.url, ['exec-server', `exec-server.bearer.${b64url('tok-bob')}`]);
  assert.ok('ws' in ok);
  assert.equal(ok.protocol, 'exec-server', 'the token is never echoed back');
  ok.ws.close();
  const wrong = await openWs(server.url, ['exec-server', `exec-server.bearer.${b64url('tok-nobody')}`]);
  assert.deepEqual(wrong, { status: 401 });
  const none = await openWs(server.url, ['exec-server']);
  assert.deepEqual(none, { status: 401 });
  // Only the token's subprotocol: nothing could be selected, so the upgrade is refused saying why.
  const alone = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const ws = new WebSocket(`${server.url}/v1/ws`, [`exec-server.bearer.${b64url('tok-bob')}`]);
    ws.once('open', () => reject(new Error('upgraded with the token subprotocol alone')));
    ws.once('unexpected-response', (req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => {
        body += c.toString();
      });
      res.once('end', () => {
        req.destroy();
        resolve({ status: res.statusCode ?? 0, body });
      });
    });
    ws.once('error', reject);
  });
  assert.equal(alone.status, 400);
  const body = JSON.parse(alone.body) as { code: string; message: string };
  assert.equal(body.code, 'EXEC_ERR_INVALID_REQUEST');
  assert.match(body.message, /must offer the subprotocol exec-server too/);
});

test('an observer follows a session without evicting its client, is not asked for approvals, and is closed on delete', async (t) => {
  const server = await startServer({});
  t.after(() => server.close());
  const asked: string[] = [];
  const agent = await TestSession.open(
    server.url,
    { session: { approvalPolicy: 'untrusted' } },
    {
      onServerRequest: (method) => {
        asked.push(`agent:${method}`);
        return { decision: 'approved' };
      },
    },
  );
  const observer = await TestSession.open(
    server.url,
    { resumeSessionId: agent.sessionId, observe: true },
    {
      onServerRequest: (method) => {
        asked.push(`observer:${method}`);
        return { decision: 'denied' };
      },
    },
  );
  const result = await agent.run('p1', ['sh', '-c', 'echo from-agent']);
  assert.equal(result.stdout, 'from-agent\n', 'the agent is still attached and was approved by itself');
  await observer.waitFor(
    (all) => all.some((n) => n.method === 'process/closed' && n.params['processId'] === 'p1'),
    10_000,
    'the observer sees the events',
  );
  assert.deepEqual(asked, ['agent:approval/request']);
  const live = server.app.sessions.get(agent.sessionId, DEFAULT_TENANT);
  const lastActivity = live.lastActivity;
  await sleep(20);
  const info = await observer.request<{ attached: boolean }>('session/info');
  assert.equal(info.attached, true, 'the agent remains the session client');
  assert.equal(live.lastActivity, lastActivity, 'watching is not activity (an idle session still expires)');

  const list = await observer.request<{ processes: Array<Record<string, unknown>> }>('process/list');
  const p1 = list.processes.find((p) => p['processId'] === 'p1');
  assert.equal(typeof p1?.['endedAtMs'], 'number');
  assert.ok((p1?.['endedAtMs'] as number) >= (p1?.['createdAtMs'] as number));
  assert.equal(p1?.['sandboxDenied'], false);

  await assert.rejects(TestSession.open(server.url, { observe: true }), /observe needs resumeSessionId/);

  const closed = new Promise<number>((resolve) => observer.conn.socket.once('close', (code) => resolve(code)));
  const del = await fetch(`${server.httpUrl}/v1/sessions/${agent.sessionId}`, { method: 'DELETE' });
  assert.equal(del.status, 204);
  assert.equal(await closed, 4000);
});

test('a slow observer never pauses the session: it is cut and resumes instead', { timeout: 120_000 }, async () => {
  const workspaceRoot = await mkdtemp(join(tmpdir(), 'exec-server-test-'));
  // A stall timeout longer than the test: were the observer able to pause the session, the
  // command would wait for it and the test would time out.
  const config = loadConfig(
    [
      '--listen',
      'ws://127.0.0.1:0',
      '--workspace-root',
      workspaceRoot,
      '--ws-buffer-limit-bytes',
      '1048576',
      '--ws-stall-timeout-ms',
      '600000',
    ],
    {},
  );
  const backend = await createLocalBackend({ workspaceRoot }, silentLogger);
  const app = await buildApp({ config, backend });
  await app.listen({ host: '127.0.0.1', port: 0 });
  try {
    const address = app.server.address();
    const url = `ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
    const agent = await TestSession.open(url, {});
    const observer = await TestSession.open(url, { resumeSessionId: agent.sessionId, observe: true });
    // The observer stops reading; a client that did so would pause the command.
    const cut = new Promise<number>((resolve) => observer.conn.socket.once('close', (code) => resolve(code)));
    observer.conn.socket.pause();
    const result = await agent.run(
      'flood',
      ['sh', '-c', 'head -c 16777216 /dev/zero | tr "\\0" x; echo; echo done'],
      {},
    );
    assert.match(result.stdout, /done\n$/, 'the command ran to its end');
    observer.conn.socket.resume();
    assert.equal(await cut, 4001, 'the observer was cut as a slow consumer (it may resume from its last seq)');
    await agent.close();
  } finally {
    await app.close();
  }
});
