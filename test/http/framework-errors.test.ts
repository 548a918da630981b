/**
 * Errors answered before any route runs (src/app.ts, `createFastify`): the router's refusals (a
 * path segment too long, a path whose percent-encoding does not decode) and Node's (a request
 * head over the size limit) leave in the registry's `{code, message}` body with the code's one
 * status, like every other error (docs/errors.md). Every id a route's schema allows reaches
 * that route, so it answers as it does for any other id.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test, type TestContext } from 'node:test';
import { ERROR_REGISTRY, type ErrorCode } from '../../src/errors.ts';
import { serverWithApi, type Answer } from './helpers.ts';

const TOKEN = 'framework-errors-token';

/** The answer is the registry's: exactly `{code, message}`, with the status the registry gives that code. */
function assertRegistryError(r: Answer, code: ErrorCode, message?: RegExp): void {
  assert.equal(typeof r.body, 'object', `a JSON body: ${String(r.body)}`);
  assert.deepEqual(Object.keys(r.body).sort(), ['code', 'message'], JSON.stringify(r.body));
  assert.equal(r.body.code, code, JSON.stringify(r.body));
  assert.equal(r.status, ERROR_REGISTRY[code][0]);
  if (message) assert.match(r.body.message ?? '', message);
}

/** One HTTP/1.1 request written on a socket as it is; the raw answer, once the server closed or answered. */
function rawRequest(port: number, head: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (s: string) => {
      text += s;
    });
    socket.on('error', (err: NodeJS.ErrnoException) => (text === '' ? reject(err) : resolve(text)));
    socket.on('close', () => resolve(text));
    socket.write(head);
  });
}

async function api(t: TestContext) {
  return serverWithApi(t, { flags: ['--token', TOKEN] }, TOKEN);
}

test('session ids of 101 to 128 characters reach the routes: 404 session not found, not a router error', async (t) => {
  const call = await api(t);
  for (const length of [101, 128]) {
    const id = 'a'.repeat(length);
    assertRegistryError(await call('GET', `/v1/sessions/${id}`), 'EXEC_ERR_SESSION_NOT_FOUND', /not found/);
    assertRegistryError(await call('GET', `/v1/sessions/${id}/files/list?path=/`), 'EXEC_ERR_SESSION_NOT_FOUND');
  }
  // 128 characters of four UTF-8 bytes and two UTF-16 units each: still an id the schema allows.
  assertRegistryError(
    await call('GET', `/v1/sessions/${encodeURIComponent('😀'.repeat(128))}`),
    'EXEC_ERR_SESSION_NOT_FOUND',
  );
  assertRegistryError(
    await call('GET', `/v1/sessions/${'a'.repeat(129)}`),
    'EXEC_ERR_INVALID_PARAMS',
    /more than 128 characters/,
  );
});

test('snapshot ids up to 512 characters reach the route; longer ones are invalid params', async (t) => {
  const call = await api(t);
  // The local backend has no snapshots: its route's own answer, whatever the id.
  assertRegistryError(await call('DELETE', `/v1/snapshots/${'b'.repeat(512)}`), 'EXEC_ERR_NOT_FOUND', /docker/);
  assertRegistryError(
    await call('DELETE', `/v1/snapshots/${'b'.repeat(513)}`),
    'EXEC_ERR_INVALID_PARAMS',
    /more than 512 characters/,
  );
  // Past what any schema allows, the router refuses the segment itself, in the same format.
  assertRegistryError(
    await call('DELETE', `/v1/snapshots/${'b'.repeat(5000)}`),
    'EXEC_ERR_INVALID_PARAMS',
    /path segment is longer than/,
  );
  assertRegistryError(
    await call('GET', `/v1/sessions/${'a'.repeat(5000)}`),
    'EXEC_ERR_INVALID_PARAMS',
    /path segment is longer than/,
  );
});

test('a path whose percent-encoding does not decode is an invalid request', async (t) => {
  const call = await api(t);
  for (const path of ['/v1/sessions/%ZZ', '/v1/sessions/%E0%A4', '/v1/sessions/x/files/%']) {
    assertRegistryError(await call('GET', path), 'EXEC_ERR_INVALID_REQUEST', /percent-encoding/);
  }
});

test('a request head over the size limit: 413 EXEC_ERR_TOO_LARGE as JSON, then the connection ends', async (t) => {
  const call = await api(t);
  const port = Number(new URL(call.server.httpUrl).port);
  const head =
    `GET /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${TOKEN}\r\n` +
    `X-Big: ${'x'.repeat(20_000)}\r\n\r\n`;
  const answer = await rawRequest(port, head);
  const [status, body] = [/^HTTP\/1\.1 (\d{3}) /.exec(answer)?.[1], answer.slice(answer.indexOf('\r\n\r\n') + 4)];
  assert.match(answer, /\r\ncontent-type: application\/json\r\n/i);
  const parsed = JSON.parse(body) as Record<string, unknown>;
  assertRegistryError(
    { status: Number(status), body: parsed, headers: new Headers() },
    'EXEC_ERR_TOO_LARGE',
    /headers larger than \d+ bytes/,
  );
  // A head of ordinary size on a new connection is served as always.
  assert.equal((await call('GET', '/v1/sessions')).status, 200);
});

test('a request that is not HTTP: 400 EXEC_ERR_INVALID_REQUEST as JSON, naming the parser error', async (t) => {
  const call = await api(t);
  const port = Number(new URL(call.server.httpUrl).port);
  for (const [head, why] of [
    ['GARBAGE / HTTP/1.1\r\nHost: x\r\n\r\n', /HPE_INVALID_METHOD/],
    ['GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n', /HPE_INVALID_CONTENT_LENGTH/],
  ] as const) {
    const answer = await rawRequest(port, head);
    const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(answer)?.[1]);
    const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as Record<string, unknown>;
    assertRegistryError({ status, body, headers: new Headers() }, 'EXEC_ERR_INVALID_REQUEST', why);
  }
});
