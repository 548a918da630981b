/**
 * Requests judged by one part of the server and served by another, sent as raw bytes so that no
 * client normalizes them. The Origin check against a rebound name (a tokenless server: the
 * `Host` and `Origin` a page of another site sends once its name points at the server); the
 * preview proxy's framing of a chunked body toward the application (a body the application
 * would read as a request of its own); and what the application is told besides the request:
 * never a token of ours, nor the fleet's own headers.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test, type TestContext } from 'node:test';
import type { PreviewAnswer } from '../../src/protocol/index.ts';
import { requestJson } from './helpers.ts';
import { startServer, TestSession } from '../support/harness.ts';

const TOKEN = 'edge-parsing-token';
const KEY = 'dGhlIHNhbXBsZSBub25jZQ==';

/** One raw request; everything the server answered until it closed (or 5 s passed). */
function raw(port: number, text: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(text));
    let out = '';
    socket.on('data', (d) => {
      out += String(d);
      // A WebSocket handshake's answer is all there is to read.
      if (out.startsWith('HTTP/1.1 101')) socket.destroy();
    });
    socket.on('error', () => socket.destroy());
    socket.on('close', () => resolve(out));
    socket.setTimeout(5_000, () => socket.destroy());
  });
}

const statusOf = (answer: string): string => answer.split('\r\n')[0] ?? '';

test('origin (tokenless): a rebound name is not the server own origin; an address or localhost is', {
  timeout: 60_000,
}, async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const port = Number(new URL(server.httpUrl).port);
  const create = (host: string): string =>
    `POST /v1/sessions HTTP/1.1\r\nHost: ${host}\r\nOrigin: http://${host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`;
  const upgrade = (host: string): string =>
    `GET /v1/ws HTTP/1.1\r\nHost: ${host}\r\nOrigin: http://${host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${KEY}\r\n\r\n`;
  for (const host of [`rebound.example:${port}`, `127.0.0.1.rebound.example:${port}`, `localhost.example:${port}`]) {
    const created = await raw(port, create(host));
    assert.match(statusOf(created), / 403 /, `POST with Host and Origin ${host}`);
    assert.match(created, /EXEC_ERR_ORIGIN_FORBIDDEN/);
    assert.match(statusOf(await raw(port, upgrade(host))), / 403 /, `upgrade with Host and Origin ${host}`);
  }
  assert.equal(server.app.sessions.size, 0);
  // The console's own origin on loopback, however it is spelled, still passes.
  for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, `console.localhost:${port}`]) {
    assert.match(statusOf(await raw(port, upgrade(host))), / 101 /, `upgrade with Host and Origin ${host}`);
  }
  assert.match(statusOf(await raw(port, create(`localhost:${port}`))), / 201 /);
});

test('origin (tokens): a named host is the server own origin (a deployment behind its name)', {
  timeout: 60_000,
}, async (t) => {
  const server = await startServer({ flags: ['--token', TOKEN] });
  t.after(() => server.close());
  const port = Number(new URL(server.httpUrl).port);
  const host = 'exec.example';
  const answer = await raw(
    port,
    `GET /v1/ws HTTP/1.1\r\nHost: ${host}\r\nOrigin: https://${host}\r\nX-Forwarded-Proto: https\r\nAuthorization: Bearer ${TOKEN}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${KEY}\r\n\r\n`,
  );
  assert.match(statusOf(answer), / 101 /);
});

/** An application that answers, as a JSON string, the raw bytes its connection carried (after 300 ms of quiet). */
async function rawDumpApp(session: TestSession, port: number): Promise<void> {
  const app = `require('node:net').createServer((c) => { let b = ''; let t; c.on('data', (d) => { b += d; clearTimeout(t); t = setTimeout(() => { const body = JSON.stringify(b); c.end('HTTP/1.1 200 OK\\r\\ncontent-length: ' + Buffer.byteLength(body) + '\\r\\nconnection: close\\r\\n\\r\\n' + body); }, 300); }); }).listen(${port}, '127.0.0.1', () => console.log('up'));`;
  await session.start('dump', [process.execPath, '-e', app]);
  await session.waitFor(
    (all) => all.some((n) => n.method === 'process/output' && n.params['processId'] === 'dump'),
    20_000,
    'app listening',
  );
}

/** What the application received for one raw request through the proxy. */
async function seenByApp(serverPort: number, text: string): Promise<string> {
  const answer = await raw(serverPort, text);
  assert.match(statusOf(answer), / 200 /, answer.slice(0, 300));
  return JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as string;
}

/** A server with tokens, a session whose port `appPort` runs the dump application, exposed. */
async function previewSetup(
  t: TestContext,
): Promise<{ port: number; base: string; signed: string; sessionToken: string }> {
  const server = await startServer({ flags: ['--token', TOKEN] });
  t.after(() => server.close());
  const session = await TestSession.open(server.url, { session: { previewPorts: true } }, { token: TOKEN });
  t.after(() => session.close());
  const appPort = 27_000 + Math.floor(Math.random() * 1000);
  await rawDumpApp(session, appPort);
  const exposed = await requestJson<PreviewAnswer>(
    `${server.httpUrl}/v1/sessions/${session.sessionId}/ports`,
    'POST',
    { port: appPort },
    TOKEN,
  );
  assert.equal(exposed.status, 201);
  const minted = await requestJson<{ token: string }>(
    `${server.httpUrl}/v1/sessions/${session.sessionId}/tokens`,
    'POST',
    {},
    TOKEN,
  );
  assert.equal(minted.status, 201);
  return {
    sessionToken: minted.body.token,
    port: Number(new URL(server.httpUrl).port),
    base: `/v1/sessions/${session.sessionId}/ports/${appPort}`,
    signed: decodeURIComponent(exposed.body.signedPath.split('exec_preview_token=')[1] ?? ''),
  };
}

const AUTH = `Authorization: Bearer ${TOKEN}\r\n`;

test('preview proxy: a chunked body reaches the application as one chunked body, whatever the method', {
  timeout: 90_000,
}, async (t) => {
  const { port, base } = await previewSetup(t);
  // A method that seldom has a body: the application must be told its framing, else the
  // body's bytes are a second request the proxy never saw.
  const inner = 'GET /smuggled HTTP/1.1\r\nHost: app\r\n\r\n';
  const chunk = `${Buffer.byteLength(inner).toString(16)}\r\n${inner}\r\n0\r\n\r\n`;
  for (const method of ['GET', 'DELETE', 'OPTIONS', 'POST']) {
    const seen = await seenByApp(
      port,
      `${method} ${base}/x HTTP/1.1\r\nHost: h\r\n${AUTH}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunk}`,
    );
    const [head = '', body = ''] = seen.split(/\r\n\r\n([\s\S]*)/);
    assert.match(head, new RegExp(`^${method} /x HTTP/1.1\r\n`));
    assert.match(head, /\r\ntransfer-encoding: chunked(\r\n|$)/i, `${method}: ${JSON.stringify(seen)}`);
    assert.equal(body, chunk, `${method}: the body arrives as one chunked body`);
  }
});

test('preview proxy: no token of ours nor fleet header reaches the application, whatever opened the port', {
  timeout: 90_000,
}, async (t) => {
  const { port, base, signed, sessionToken } = await previewSetup(t);
  // A signed cookie opens the port; the tenant token sent beside it is ours all the same.
  const seen = await seenByApp(
    port,
    `GET ${base}/y HTTP/1.1\r\nHost: h\r\nCookie: exec_preview=${signed}; theirs=1\r\n${AUTH}X-Exec-Server-Fleet-Local: 1\r\nX-Exec-Server-Client: x\r\nX-Exec-Server-Forwarded-By: r\r\nConnection: close\r\n\r\n`,
  );
  assert.match(seen, /^GET \/y HTTP\/1.1\r\n/);
  assert.ok(!seen.includes(TOKEN));
  assert.doesNotMatch(seen, /authorization:/i);
  assert.doesNotMatch(seen, /exec_preview=/);
  assert.match(seen, /\r\ncookie: theirs=1\r\n/);
  assert.doesNotMatch(seen, /x-exec-server-/i);
  // A session token beside the signed URL's token, likewise.
  const withSessionToken = await seenByApp(
    port,
    `GET ${base}/w HTTP/1.1\r\nHost: h\r\nCookie: exec_preview=${signed}\r\nAuthorization: Bearer ${sessionToken}\r\nConnection: close\r\n\r\n`,
  );
  assert.doesNotMatch(withSessionToken, /authorization:/i);
  assert.ok(!withSessionToken.includes(sessionToken));
  // The application's own credentials still pass beside the cookie.
  const basic = await seenByApp(
    port,
    `GET ${base}/z HTTP/1.1\r\nHost: h\r\nCookie: exec_preview=${signed}\r\nAuthorization: Basic YXBwOnVzZXI=\r\nConnection: close\r\n\r\n`,
  );
  assert.match(basic, /\r\nauthorization: Basic YXBwOnVzZXI=\r\n/);
});

test('preview proxy: only what the server took as an upgrade is tunnelled, and every tunnel passes the Origin check', {
  timeout: 90_000,
}, async (t) => {
  const { port, base } = await previewSetup(t);
  // `Upgrade` without `Connection: upgrade` is no upgrade to the server's parser, which reads
  // the body: the application must get the request with that body, not a tunnel's head.
  const seen = await seenByApp(
    port,
    `POST ${base}/x HTTP/1.1\r\nHost: h\r\n${AUTH}Upgrade: foo\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello`,
  );
  assert.match(seen, /^POST \/x HTTP\/1.1\r\n/);
  assert.doesNotMatch(seen, /\r\nupgrade:/i);
  assert.ok(seen.endsWith('\r\n\r\nhello'), JSON.stringify(seen));
  // An upgrade to another protocol than `websocket` is tunnelled as one: a foreign Origin is
  // refused for it as for a WebSocket.
  for (const protocol of ['websocket, foo', 'foo']) {
    const answer = await raw(
      port,
      `GET ${base}/x HTTP/1.1\r\nHost: h\r\n${AUTH}Origin: http://evil.example\r\nConnection: Upgrade\r\nUpgrade: ${protocol}\r\n\r\n`,
    );
    assert.match(statusOf(answer), / 403 /, `Upgrade: ${protocol}: ${answer.slice(0, 200)}`);
    assert.match(answer, /EXEC_ERR_ORIGIN_FORBIDDEN/);
  }
});
