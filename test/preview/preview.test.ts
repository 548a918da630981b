/**
 * Preview ports on both backends, in sessions without network (their only interface is their
 * loopback): busybox httpd started in the session serves a page through the proxy (bearer
 * token and signed URL, on the port's path and on its wildcard host), a WebSocket echo server
 * inside works through both, an expired signature, another tenant and an unexposed port are
 * refused, and the port closes with the session. Bad input and a real expiry: limits.test.ts.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { test } from 'node:test';
import type { PreviewAnswer, SessionInfo } from '../../src/protocol/index.ts';
import { dockerTestOptions } from '../docker/engine.ts';
import { requestJson, type Answer } from '../http/helpers.ts';
import { BACKENDS } from '../support/backends.ts';
import { nextMessage, wsEcho, wsOpen } from './ws-echo.ts';
import type { BackendKind } from '../support/harness.ts';

// Loaded once the engine check above is done: evaluating the server's modules takes seconds,
// which must not run while that check waits for the engine's answer.
const { serverFor, sessionFor, sleep, startServer } = await import('../support/harness.ts');
const { PreviewSigner } = await import('../../src/preview/signing.ts');

const SECRET = 'preview-test-secret';
const ALICE = 'alice-token';
const BOB = 'bob-token';

async function get(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string; headers: Headers }> {
  const r = await fetch(url, { headers, redirect: 'manual' });
  return { status: r.status, body: await r.text(), headers: r.headers };
}

/** Polls `url` until it answers 200 (the server inside is still starting: the proxy answers 502). */
async function until200(url: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  const deadline = Date.now() + 20_000;
  let last = { status: 0, body: '' };
  while (Date.now() < deadline) {
    last = await get(url, headers);
    if (last.status === 200) return last;
    assert.equal(last.status, 502, `while the server starts the proxy answers 502, got ${last.status} ${last.body}`);
    await sleep(200);
  }
  throw new Error(`no 200 from ${url}: ${last.status} ${last.body}`);
}

/** A GET with its own Host header (fetch does not let a caller set one). */
function hostGet(
  base: string,
  host: string,
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; body: string; headers: Record<string, string | string[] | undefined> }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: url.hostname, port: url.port, path, headers: { ...headers, host } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
    });
    req.on('error', reject);
    req.end();
  });
}

function api<T = unknown>(
  base: string,
  method: string,
  path: string,
  token: string,
  body?: unknown,
): Promise<Answer<T>> {
  return requestJson<T>(`${base}${path}`, method, body, token);
}

for (const backend of BACKENDS) {
  const options =
    backend === 'docker' ? { ...dockerTestOptions, timeout: dockerTestOptions.timeout + 60_000 } : { timeout: 120_000 };

  test(
    `preview (${backend}): httpd and a WebSocket echo server in a session without network, through the proxy`,
    options,
    async (t) => {
      const server = await startServer({
        backend: backend as BackendKind,
        flags: ['--tokens', `alice:${ALICE},bob:${BOB}`, '--preview-secret', SECRET, '--preview-host', 'preview.test'],
      });
      t.after(() => server.close());
      const base = server.httpUrl;
      const session = await sessionFor(t, server.url, { session: { previewPorts: true } }, { token: ALICE });
      const id = session.sessionId;
      const workdir = String((session.initResult['environmentInfo'] as Record<string, unknown>)['cwd'] ?? '').replace(
        /^file:\/\//,
        '',
      );
      const info0 = await session.request('session/info');
      const root = String(info0['workdir']);
      assert.ok(root.startsWith('/'), `workdir ${root} (${workdir})`);

      // httpd serving a page from the workspace; the session has no network (default policy).
      await session.request('fs/createDirectory', { path: `${root}/www`, recursive: true });
      await session.request('fs/writeFile', {
        path: `${root}/www/index.html`,
        dataBase64: Buffer.from('<h1>preview works</h1>\n').toString('base64'),
      });
      const httpPort = 18_000 + Math.floor(Math.random() * 1000);
      await session.start('httpd', ['busybox', 'httpd', '-f', '-p', `127.0.0.1:${httpPort}`, '-h', `${root}/www`]);

      const exposed = await api<PreviewAnswer>(base, 'POST', `/v1/sessions/${id}/ports`, ALICE, { port: httpPort });
      assert.equal(exposed.status, 201, JSON.stringify(exposed.body));
      assert.equal(exposed.body.path, `/v1/sessions/${id}/ports/${httpPort}/`);
      const page = await until200(`${base}${exposed.body.path}`, { authorization: `Bearer ${ALICE}` });
      assert.equal(page.body, '<h1>preview works</h1>\n');
      // The proxy went through the session: from the server's own network the port is not there.
      await assert.rejects(fetch(`http://127.0.0.1:${httpPort}/`), /fetch failed/);
      // Nor does the session get network for it: its only interface is its own loopback.
      const netdev = await session.run('netdev', ['cat', '/proc/net/dev']);
      const interfaces = netdev.stdout
        .split('\n')
        .slice(2)
        .map((line) => line.split(':')[0]?.trim())
        .filter((name) => name !== undefined && name !== '');
      assert.deepEqual(interfaces, ['lo'], netdev.stdout);
      // The wildcard host: the same port at the root of its own host name.
      assert.equal(exposed.body.host, `p${httpPort}-${id}.preview.test`);
      const viaHost = await hostGet(base, exposed.body.host, '/index.html', { authorization: `Bearer ${ALICE}` });
      assert.equal(viaHost.status, 200);
      assert.equal(viaHost.body, '<h1>preview works</h1>\n');
      // A signed URL on the wildcard host: its cookie is for that host's root.
      const hostToken = new URL(`${base}${exposed.body.signedPath}`).searchParams.get('exec_preview_token') ?? '';
      const hostSigned = await hostGet(base, exposed.body.host, `/?exec_preview_token=${hostToken}`, {});
      assert.equal(hostSigned.status, 302);
      assert.equal(hostSigned.headers['location'], '/');
      const hostCookie = String(hostSigned.headers['set-cookie'] ?? '');
      assert.match(hostCookie, /^exec_preview=[^;]+; Path=\/; /);
      const hostPage = await hostGet(base, exposed.body.host, '/', { cookie: hostCookie.split(';')[0] ?? '' });
      assert.equal(hostPage.status, 200);
      assert.equal(hostPage.body, '<h1>preview works</h1>\n');
      assert.equal((await hostGet(base, exposed.body.host, '/', { authorization: `Bearer ${BOB}` })).status, 404);
      // The bare port path redirects to the slash form (relative links resolve under it).
      const bare = await get(`${base}/v1/sessions/${id}/ports/${httpPort}`);
      assert.equal(bare.status, 308);
      assert.equal(bare.headers.get('location'), `/v1/sessions/${id}/ports/${httpPort}/`);

      // A signed URL: traded for a cookie scoped to the port, then the page without the token.
      const signed = await get(`${base}${exposed.body.signedPath}`);
      assert.equal(signed.status, 302);
      assert.equal(signed.headers.get('location'), exposed.body.path);
      const cookie = signed.headers.get('set-cookie') ?? '';
      assert.match(
        cookie,
        new RegExp(
          `^exec_preview=[^;]+; Path=/v1/sessions/${id}/ports/${httpPort}/; Max-Age=\\d+; HttpOnly; SameSite=Lax$`,
        ),
      );
      const viaCookie = await get(`${base}${exposed.body.path}`, { cookie: cookie.split(';')[0] ?? '' });
      assert.equal(viaCookie.status, 200);
      assert.equal(viaCookie.body, '<h1>preview works</h1>\n');

      // Refused: no credentials, an expired signature, another tenant (token or signature), an unexposed port.
      assert.equal((await get(`${base}${exposed.body.path}`)).status, 401);
      const signer = new PreviewSigner(SECRET);
      const now = Math.floor(Date.now() / 1000);
      assert.equal(
        (await get(`${base}${exposed.body.path}?exec_preview_token=${signer.sign('alice', id, httpPort, now - 1)}`))
          .status,
        401,
      );
      assert.equal(
        (await get(`${base}${exposed.body.path}?exec_preview_token=${signer.sign('alice', id, httpPort, now + 60)}`))
          .status,
        302,
      );
      assert.equal((await get(`${base}${exposed.body.path}`, { authorization: `Bearer ${BOB}` })).status, 404);
      assert.equal(
        (await get(`${base}${exposed.body.path}?exec_preview_token=${signer.sign('bob', id, httpPort, now + 60)}`))
          .status,
        404,
      );
      assert.equal(
        (
          await get(
            `${base}${exposed.body.path}?exec_preview_token=${signer.sign('alice', id, httpPort + 1, now + 60)}`,
          )
        ).status,
        401,
      );
      const unexposed = await get(`${base}/v1/sessions/${id}/ports/${httpPort + 1}/`, {
        authorization: `Bearer ${ALICE}`,
      });
      assert.equal(unexposed.status, 404);
      assert.match(unexposed.body, /not exposed/);
      assert.equal((await api(base, 'POST', `/v1/sessions/${id}/ports`, BOB, { port: httpPort })).status, 404);

      // A WebSocket echo server, exposed over JSON-RPC; the application's subprotocol passes through.
      const echo = await wsEcho();
      // Into the workspace on both backends: a sandboxed command sees neither the container host's
      // files nor, on the local backend, the host's /tmp (it has a /tmp of its own).
      const echoPath = `${root}/ws-echo`;
      await session.request('fs/writeFile', { path: echoPath, dataBase64: (await readFile(echo)).toString('base64') });
      const chmod = await session.run('chmod', ['chmod', '755', echoPath]);
      assert.equal(chmod.exited['exitCode'], 0, chmod.stderr);
      const wsPort = httpPort + 500;
      await session.start('ws-echo', [echoPath, String(wsPort)]);
      const rpcExposed = await session.request('session/exposePort', { port: wsPort });
      assert.equal(rpcExposed['path'], `/v1/sessions/${id}/ports/${wsPort}/`);
      await session.waitFor(
        (all) => all.some((n) => n.method === 'process/output' && n.params['processId'] === 'ws-echo'),
        20_000,
        'ws-echo listening',
      );
      const ws = await wsOpen(
        `${server.url}/v1/sessions/${id}/ports/${wsPort}/echo`,
        { authorization: `Bearer ${ALICE}` },
        ['chat'],
      );
      assert.equal(ws.protocol, 'chat');
      const reply = nextMessage(ws);
      ws.send('ping through the proxy');
      assert.equal(await reply, 'ping through the proxy');
      const big = 'x'.repeat(60_000);
      const bigReply = nextMessage(ws);
      ws.send(big);
      assert.equal((await bigReply).length, big.length);
      // The same echo server on its wildcard host.
      const wsHost = await wsOpen(
        `${server.url}/echo`,
        { authorization: `Bearer ${ALICE}`, host: `p${wsPort}-${id}.preview.test` },
        ['chat'],
      );
      const hostReply = nextMessage(wsHost);
      wsHost.send('ping through the wildcard host');
      assert.equal(await hostReply, 'ping through the wildcard host');
      wsHost.close();

      // session/info lists the exposed ports.
      const info = await session.request('session/info');
      assert.deepEqual(
        (info['ports'] as Array<{ port: number }>).map((p) => p.port),
        [httpPort, wsPort],
      );

      // The session ends: its open WebSocket closes and its ports are gone.
      const closed = new Promise<void>((resolve) => ws.once('close', () => resolve()));
      assert.equal((await api(base, 'DELETE', `/v1/sessions/${id}`, ALICE)).status, 204);
      await closed;
      assert.equal((await get(`${base}${exposed.body.path}`, { authorization: `Bearer ${ALICE}` })).status, 404);
    },
  );
}

test('preview: a session that does not allow it cannot expose ports; closing a port refuses it from then on', {
  timeout: 60_000,
}, async (t) => {
  const server = await serverFor(t, { flags: ['--token', ALICE] });
  const base = server.httpUrl;
  const plain = await api<SessionInfo>(base, 'POST', '/v1/sessions', ALICE, {});
  const refused = await api(base, 'POST', `/v1/sessions/${plain.body.sessionId}/ports`, ALICE, { port: 8080 });
  assert.equal(refused.status, 403);
  assert.equal(refused.body.code, 'EXEC_ERR_REJECTED');
  const bad = await api(base, 'POST', `/v1/sessions/${plain.body.sessionId}/ports`, ALICE, { port: 70_000 });
  assert.equal(bad.status, 400);

  const allowed = await api<SessionInfo>(base, 'POST', '/v1/sessions', ALICE, { previewPorts: true });
  const id = allowed.body.sessionId;
  assert.equal((await api(base, 'POST', `/v1/sessions/${id}/ports`, ALICE, { port: 8080 })).status, 201);
  assert.deepEqual(
    (await api<{ ports: PreviewAnswer[] }>(base, 'GET', `/v1/sessions/${id}/ports`, ALICE)).body.ports.map(
      (p) => p.port,
    ),
    [8080],
  );
  assert.equal((await api(base, 'DELETE', `/v1/sessions/${id}/ports/8080`, ALICE)).status, 204);
  assert.equal((await api(base, 'DELETE', `/v1/sessions/${id}/ports/8080`, ALICE)).status, 404);
  assert.equal((await get(`${base}/v1/sessions/${id}/ports/8080/`, { authorization: `Bearer ${ALICE}` })).status, 404);
  // Malformed proxy paths are plain answers (a bad escape is 400 from the router), not failures.
  assert.equal((await get(`${base}/v1/sessions/%E0%A4/ports/8080/`, { authorization: `Bearer ${ALICE}` })).status, 400);
  assert.equal((await get(`${base}/v1/sessions/${id}/ports/99999/`, { authorization: `Bearer ${ALICE}` })).status, 404);
  assert.equal((await get(`${base}/v1/sessions/${id}/ports/0/x`, { authorization: `Bearer ${ALICE}` })).status, 404);
});

test('preview signer: a token opens its own session, port and tenant until it expires', () => {
  const signer = new PreviewSigner('k');
  const token = signer.sign('alice', 's1', 3000, 1_000);
  assert.equal(signer.verify('s1', 3000, token, 999), 'alice');
  assert.equal(signer.verify('s1', 3000, token, 1_000), undefined);
  assert.equal(signer.verify('s2', 3000, token, 999), undefined);
  assert.equal(signer.verify('s1', 3001, token, 999), undefined);
  assert.equal(new PreviewSigner('other').verify('s1', 3000, token, 999), undefined);
  assert.equal(signer.verify('s1', 3000, token.replace(/^1000\./, '9999.'), 999), undefined);
  assert.equal(signer.verify('s1', 3000, 'garbage', 999), undefined);
});

test('preview (local): what authenticated the caller never reaches the application; bodies stream both ways', {
  timeout: 90_000,
}, async (t) => {
  const server = await serverFor(t, { flags: ['--token', ALICE] });
  const base = server.httpUrl;
  const session = await sessionFor(t, server.url, { session: { previewPorts: true } }, { token: ALICE });
  const id = session.sessionId;
  const port = 19_000 + Math.floor(Math.random() * 500);
  // An application that answers what it received: method, path, headers, and the body's length.
  const app = `require('node:http').createServer((q, r) => { let n = 0; q.on('data', (d) => (n += d.length)); q.on('end', () => { r.setHeader('content-type', 'application/json'); r.end(JSON.stringify({ method: q.method, url: q.url, headers: q.headers, bodyBytes: n, pad: 'y'.repeat(Number(q.headers['x-pad'] ?? 0)) })); }); }).listen(${port}, '127.0.0.1', () => console.log('up'));`;
  await session.start('app', [process.execPath, '-e', app]);
  await session.waitFor(
    (all) => all.some((n) => n.method === 'process/output' && n.params['processId'] === 'app'),
    20_000,
    'app listening',
  );
  const exposed = await api<PreviewAnswer>(base, 'POST', `/v1/sessions/${id}/ports`, ALICE, { port });
  assert.equal(exposed.status, 201);

  const r = await fetch(`${base}${exposed.body.path}sub/page?x=1&q=a%20b`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${ALICE}`,
      cookie: 'exec_preview=whatever; app_session=keep-me',
      'x-pad': String(3 * 1024 * 1024),
      // What replicas of a fleet tell each other never reaches the application.
      'x-exec-server-client': '192.0.2.1;1;AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA',
      'x-exec-server-forwarded-by': 'r1',
    },
    body: Buffer.alloc(5 * 1024 * 1024, 7),
  });
  assert.equal(r.status, 200);
  const seen = (await r.json()) as {
    method: string;
    url: string;
    headers: Record<string, string>;
    bodyBytes: number;
    pad: string;
  };
  assert.equal(seen.method, 'POST');
  assert.equal(seen.url, '/sub/page?x=1&q=a%20b');
  assert.equal(seen.bodyBytes, 5 * 1024 * 1024);
  assert.equal(seen.pad.length, 3 * 1024 * 1024);
  assert.equal(seen.headers['authorization'], undefined);
  assert.equal(seen.headers['cookie'], 'app_session=keep-me');
  assert.equal(seen.headers['x-forwarded-prefix'], `/v1/sessions/${id}/ports/${port}`);
  assert.equal(seen.headers['x-exec-server-client'], undefined);
  assert.equal(seen.headers['x-exec-server-forwarded-by'], undefined);

  // With the signed cookie, the application's own Authorization header passes through untouched.
  const signed = await get(`${base}${exposed.body.signedPath.replace('?', '?x=2&')}`);
  assert.equal(signed.status, 302);
  assert.equal(signed.headers.get('location'), `${exposed.body.path}?x=2`);
  const cookie = (signed.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  const own = await get(`${base}${exposed.body.path}?x=2`, { cookie, authorization: 'Basic YXBwOnVzZXI=' });
  assert.equal(own.status, 200);
  const ownSeen = JSON.parse(own.body) as { url: string; headers: Record<string, string> };
  assert.equal(ownSeen.url, '/?x=2');
  assert.equal(ownSeen.headers['authorization'], 'Basic YXBwOnVzZXI=');
  assert.equal(ownSeen.headers['cookie'], undefined);
});
