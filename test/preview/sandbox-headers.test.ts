/**
 * A preview on the API origin cannot act as the console: every answer of a path-mode preview
 * URL carries `Content-Security-Policy: sandbox allow-scripts allow-forms allow-popups` (never
 * allow-same-origin) and `nosniff`, whatever the application sends, through a real session on
 * each backend; the wildcard host (a preview's own origin) does not need them. The console's
 * own CSP names its files, not `'self'`.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { test } from 'node:test';
import { dockerTestOptions } from '../docker/engine.ts';
import { exposePort } from '../http/helpers.ts';
import { BACKENDS } from '../support/backends.ts';
import type { BackendKind } from '../support/harness.ts';

const { sleep, startServer, TestSession } = await import('../support/harness.ts');
const { PREVIEW_SANDBOX_HEADERS } = await import('../../src/preview/routes.ts');

const TOKEN = 'csp-test-token';
const SANDBOX = 'sandbox allow-scripts allow-forms allow-popups';

type Headers = Record<string, string | string[] | undefined>;

/** A GET with its own Host header; status, headers, body. */
function get(
  base: string,
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; headers: Headers; body: string }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: url.hostname, port: url.port, path, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      // Distinct: a repeated header (two policies) stays two values instead of one joined string.
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, headers: { ...res.headers, ...csp(res.headersDistinct) }, body }),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

/** Polls until the application in the session answers (502 while it starts). */
async function until200(
  base: string,
  path: string,
  headers: Record<string, string>,
): Promise<{ headers: Headers; body: string }> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const r = await get(base, path, headers);
    if (r.status === 200) return r;
    assert.equal(r.status, 502, `${r.status} ${r.body}`);
    if (Date.now() > deadline) throw new Error(`no 200 from ${path}`);
    await sleep(200);
  }
}

function csp(distinct: Record<string, string[] | undefined>): Headers {
  const v = distinct['content-security-policy'];
  return v === undefined ? {} : { 'content-security-policy': v };
}

function csps(h: Headers): string[] {
  const v = h['content-security-policy'];
  return v === undefined ? [] : Array.isArray(v) ? v : [v];
}

test('preview sandbox headers: the constant is the documented policy, without allow-same-origin', () => {
  assert.equal(PREVIEW_SANDBOX_HEADERS['content-security-policy'], SANDBOX);
  assert.doesNotMatch(SANDBOX, /allow-same-origin/);
  assert.equal(PREVIEW_SANDBOX_HEADERS['x-content-type-options'], 'nosniff');
});

for (const backend of BACKENDS) {
  const options = backend === 'docker' ? dockerTestOptions : { timeout: 90_000 };
  test(
    `preview (${backend}): a path-mode page carries the sandbox CSP and nosniff; its wildcard host does not need them`,
    options,
    async (t) => {
      const server = await startServer({
        backend: backend as BackendKind,
        flags: ['--token', TOKEN, '--preview-host', 'preview.test'],
      });
      t.after(() => server.close());
      const session = await TestSession.open(server.url, { session: { previewPorts: true } }, { token: TOKEN });
      t.after(() => session.close());
      const root = String((await session.request('session/info'))['workdir']);
      await session.request('fs/createDirectory', { path: `${root}/www`, recursive: true });
      const page = '<script>document.title = sessionStorage.getItem("token")</script>\n';
      await session.request('fs/writeFile', {
        path: `${root}/www/index.html`,
        dataBase64: Buffer.from(page).toString('base64'),
      });
      const port = 22_000 + Math.floor(Math.random() * 1000);
      await session.start('httpd', ['busybox', 'httpd', '-f', '-p', `127.0.0.1:${port}`, '-h', `${root}/www`]);
      const exposed = { body: await exposePort(server.httpUrl, session.sessionId, port, TOKEN) };
      const auth = { authorization: `Bearer ${TOKEN}` };

      const viaPath = await until200(server.httpUrl, `${exposed.body.path}index.html`, auth);
      assert.equal(viaPath.body, page);
      assert.match(String(viaPath.headers['content-type']), /text\/html/);
      assert.deepEqual(csps(viaPath.headers), [SANDBOX]);
      assert.equal(viaPath.headers['x-content-type-options'], 'nosniff');
      // Every answer of the path, not only pages: a missing file too.
      const missing = await get(server.httpUrl, `${exposed.body.path}nothing.js`, auth);
      assert.equal(missing.status, 404);
      assert.deepEqual(csps(missing.headers), [SANDBOX]);
      // A signed URL's page, reached through the cookie the server gave for it.
      const signed = await get(server.httpUrl, exposed.body.signedPath, {});
      assert.equal(signed.status, 302);
      const cookie = String(signed.headers['set-cookie'] ?? '').split(';')[0] ?? '';
      const viaCookie = await get(server.httpUrl, exposed.body.path, { cookie });
      assert.equal(viaCookie.status, 200);
      assert.deepEqual(csps(viaCookie.headers), [SANDBOX]);

      // Its own origin: the wildcard host needs no sandbox.
      const viaHost = await get(server.httpUrl, '/index.html', { ...auth, host: exposed.body.host ?? '' });
      assert.equal(viaHost.status, 200);
      assert.equal(viaHost.body, page);
      assert.deepEqual(csps(viaHost.headers), []);
    },
  );
}

test("preview (local): the application's own CSP is kept beside the sandbox, its nosniff cannot be dropped", {
  timeout: 90_000,
}, async (t) => {
  const server = await startServer({ flags: ['--token', TOKEN] });
  t.after(() => server.close());
  const session = await TestSession.open(server.url, { session: { previewPorts: true } }, { token: TOKEN });
  t.after(() => session.close());
  const port = 23_000 + Math.floor(Math.random() * 1000);
  const app = `require('node:http').createServer((q, r) => { r.setHeader('content-security-policy', "default-src 'self'"); r.setHeader('x-content-type-options', 'sniff-please'); r.setHeader('content-type', 'text/html'); r.end('<p>app</p>'); }).listen(${port}, '127.0.0.1');`;
  await session.start('app', [process.execPath, '-e', app]);
  const exposed = { body: await exposePort(server.httpUrl, session.sessionId, port, TOKEN) };
  const r = await until200(server.httpUrl, exposed.body.path, { authorization: `Bearer ${TOKEN}` });
  assert.deepEqual(csps(r.headers).sort(), ["default-src 'self'", SANDBOX].sort());
  assert.equal(r.headers['x-content-type-options'], 'nosniff');
});
