/**
 * The one Origin rule (src/transport/origin.ts) on every WebSocket route, /mcp and the HTTP API,
 * against a real server on loopback: a foreign Origin (or `null`, or this host under another scheme) is
 * refused with 403 before any session exists, on a tokenless server and with tokens, whatever
 * the credentials; no Origin (a non-browser client), the server's own origin (the console,
 * the wildcard preview host) and an origin of `--allowed-origins` pass.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import WebSocket from 'ws';
import { loadConfig } from '../../src/config.ts';
import { exposePort, mcpInitialize } from './helpers.ts';
import { startServer, TestSession, type TestServer } from '../support/harness.ts';

const TOKEN = 'origin-test-token';
const EVIL = 'http://evil.example';

/** The HTTP status an upgrade got: 101 when it opened (the socket is closed again). */
function upgradeStatus(url: string, headers: Record<string, string>, protocols: string[] = []): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, protocols, { headers });
    ws.once('open', () => {
      ws.close();
      resolve(101);
    });
    ws.once('unexpected-response', (_req, res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    ws.once('error', reject);
  });
}

/** Whether `initialize` succeeds over a WebSocket opened with these headers. */
async function initializes(url: string, headers: Record<string, string>, protocols: string[] = []): Promise<boolean> {
  const ws = new WebSocket(url, protocols, { headers });
  const opened = await new Promise<boolean>((resolve, reject) => {
    ws.once('open', () => resolve(true));
    ws.once('unexpected-response', (_req, res) => {
      res.resume();
      resolve(false);
    });
    ws.once('error', reject);
  });
  if (!opened) return false;
  const answer = new Promise<Record<string, unknown>>((resolve) =>
    ws.once('message', (data) => resolve(JSON.parse(String(data)) as Record<string, unknown>)),
  );
  ws.send(JSON.stringify({ id: 1, method: 'initialize', params: { clientName: 'origin-test' } }));
  const reply = await answer;
  ws.close();
  return typeof (reply['result'] as Record<string, unknown> | undefined)?.['sessionId'] === 'string';
}

function sessionCount(server: TestServer): number {
  return server.app.sessions.size;
}

for (const withTokens of [false, true]) {
  const label = withTokens ? 'with a token' : 'tokenless';
  test(`origin (${label}): every WebSocket route refuses a foreign Origin before any session exists`, {
    timeout: 60_000,
  }, async (t) => {
    const server = await startServer({ flags: withTokens ? ['--token', TOKEN] : [] });
    t.after(() => server.close());
    const auth: Record<string, string> = withTokens ? { authorization: `Bearer ${TOKEN}` } : {};
    const own = server.httpUrl;
    const routes = [`${server.url}/`, `${server.url}/v1/ws`, `${server.url}/v1/sessions/nope/ports/3000/`];
    for (const url of routes) {
      for (const origin of [EVIL, 'null', own.replace('http:', 'https:'), `${own}.evil.example`, 'garbage']) {
        assert.equal(await upgradeStatus(url, { ...auth, origin }), 403, `${url} with Origin ${origin}`);
        // The console's way of sending its token (a subprotocol) changes nothing.
        assert.equal(
          await upgradeStatus(
            url,
            { origin },
            withTokens ? [`exec-server.bearer.${b64url(TOKEN)}`, 'exec-server'] : [],
          ),
          403,
        );
      }
    }
    assert.equal(sessionCount(server), 0, 'no session was made');
    // None (a non-browser client) and the server's own origin (the console) work.
    assert.equal(await initializes(`${server.url}/v1/ws`, auth), true);
    assert.equal(await initializes(`${server.url}/`, { ...auth, origin: own }), true);
    if (withTokens) {
      assert.equal(await upgradeStatus(`${server.url}/v1/ws`, { origin: own }), 401, 'the token is still needed');
      const viaProtocol = [`exec-server.bearer.${b64url(TOKEN)}`, 'exec-server'];
      assert.equal(await initializes(`${server.url}/v1/ws`, { origin: own }, viaProtocol), true);
    }
    // Behind a TLS proxy that says so, the https origin is the server's own.
    assert.equal(
      await upgradeStatus(`${server.url}/v1/ws`, {
        ...auth,
        origin: own.replace('http:', 'https:'),
        'x-forwarded-proto': 'https',
      }),
      101,
    );
    // /mcp: the same rule.
    const mcp = await mcpStatus(server.httpUrl, EVIL, withTokens ? TOKEN : undefined);
    assert.equal(mcp.status, 403);
    assert.match(mcp.text, /evil\.example/);
    // The HTTP API too: a page may send a bodiless POST anywhere without asking (no preflight).
    const before = sessionCount(server);
    for (const origin of [EVIL, 'null']) {
      const post = await fetch(`${server.httpUrl}/v1/sessions`, { method: 'POST', headers: { ...auth, origin } });
      assert.equal(post.status, 403, origin);
      assert.equal(((await post.json()) as { code: string }).code, 'EXEC_ERR_ORIGIN_FORBIDDEN');
    }
    assert.equal(sessionCount(server), before, 'no session was made');
    const mine = await fetch(`${server.httpUrl}/v1/sessions`, { headers: { ...auth, origin: own } });
    assert.equal(mine.status, 200, 'the console (own origin) uses the API');
  });
}

test('origin: --allowed-origins lets a listed origin open WebSockets and call /mcp, and nothing else', {
  timeout: 60_000,
}, async (t) => {
  const app = 'https://app.example.com';
  const server = await startServer({ flags: ['--allowed-origins', `${app}, http://tools.example:8080`] });
  t.after(() => server.close());
  assert.equal(await initializes(`${server.url}/v1/ws`, { origin: app }), true);
  assert.equal(await initializes(`${server.url}/v1/ws`, { origin: 'http://tools.example:8080' }), true);
  for (const origin of ['http://app.example.com', 'https://app.example.com:8443', 'http://tools.example', EVIL])
    assert.equal(await upgradeStatus(`${server.url}/v1/ws`, { origin }), 403, origin);
  assert.notEqual((await mcpStatus(server.httpUrl, app)).status, 403);
  assert.equal((await mcpStatus(server.httpUrl, EVIL)).status, 403);
});

test('origin: --allowed-origins takes scheme://host[:port] entries only', () => {
  const load = (v: string) => loadConfig(['--allowed-origins', v], {});
  assert.equal(load('https://a.example,http://b.example:81').allowedOrigins, 'https://a.example,http://b.example:81');
  assert.equal(
    loadConfig([], { EXEC_SERVER_ALLOWED_ORIGINS: 'https://a.example' }).allowedOrigins,
    'https://a.example',
  );
  for (const bad of ['a.example', 'https://a.example/path', 'ftp://a.example', '*', 'https://*.example', 'null'])
    assert.throws(() => load(bad), /--allowed-origins/, bad);
});

test('origin: a preview WebSocket opens from its own wildcard host and from no Origin, never from another', {
  timeout: 90_000,
}, async (t) => {
  const server = await startServer({ flags: ['--token', TOKEN, '--preview-host', 'preview.test'] });
  t.after(() => server.close());
  const session = await TestSession.open(server.url, { session: { previewPorts: true } }, { token: TOKEN });
  t.after(() => session.close());
  const port = 21_000 + Math.floor(Math.random() * 1000);
  // A WebSocket server in the session that greets each client with one text frame.
  const greeter = `const { createHash } = require('node:crypto'); const s = require('node:http').createServer((q, r) => r.end('http')); s.on('upgrade', (q, sock) => { const accept = createHash('sha1').update(q.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64'); sock.write('HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: ' + accept + '\\r\\n\\r\\n'); sock.write(Buffer.from([0x81, 5, ...Buffer.from('hello')])); }); s.listen(${port}, '127.0.0.1', () => console.log('up'));`;
  await session.start('greeter', [process.execPath, '-e', greeter]);
  await session.waitFor(
    (all) => all.some((n) => n.method === 'process/output' && n.params['processId'] === 'greeter'),
    20_000,
    'greeter listening',
  );
  const exposed = { body: await exposePort(server.httpUrl, session.sessionId, port, TOKEN) };
  const host = exposed.body.host ?? '';
  const bearer = { authorization: `Bearer ${TOKEN}` };
  const path = `${server.url}${exposed.body.path}`;
  assert.equal(await greeting(path, bearer), 'hello');
  assert.equal(await greeting(`${server.url}/`, { ...bearer, host, origin: `http://${host}` }), 'hello');
  assert.equal(await upgradeStatus(path, { ...bearer, origin: EVIL }), 403);
  // The page's own HTTP requests (a sandboxed page sends Origin: null) are the application's business.
  const form = await fetch(`${server.httpUrl}${exposed.body.path}`, {
    method: 'POST',
    headers: { ...bearer, origin: 'null' },
  });
  assert.equal(form.status, 200);
  assert.equal(await form.text(), 'http');
  assert.equal(await upgradeStatus(`${server.url}/`, { ...bearer, host, origin: EVIL }), 403);
  // Another session's preview host is another origin.
  const other = `p${port}-00000000-0000-4000-8000-000000000000.preview.test`;
  assert.equal(await upgradeStatus(`${server.url}/`, { ...bearer, host, origin: `http://${other}` }), 403);
});

/** The first message of a WebSocket opened with these headers. */
function greeting(url: string, headers: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.once('message', (data) => {
      ws.terminate();
      resolve(String(data));
    });
    ws.once('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    ws.once('error', reject);
  });
}

async function mcpStatus(base: string, origin: string, token?: string): Promise<{ status: number; text: string }> {
  const r = await mcpInitialize(base, { client: 'origin-test', token, headers: { origin } });
  return { status: r.status, text: await r.text() };
}

function b64url(s: string): string {
  return Buffer.from(s).toString('base64url');
}
