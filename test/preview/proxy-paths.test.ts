/**
 * Requests shaped to leave a preview port (issue 25, "What held"), sent as raw bytes so that no
 * client normalizes them: dot segments, encoded and not, on the port's path and on its wildcard
 * host, reach only the application on that port (which sees them as its own path), never the
 * server's API or another session's port; an absolute-form request target never makes the
 * server connect to the host it names, and CONNECT is not a tunnel.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test } from 'node:test';
import type { PreviewAnswer } from '../../src/protocol/index.ts';
import { requestJson } from '../http/helpers.ts';
import { startServer, TestSession } from '../support/harness.ts';

const TOKEN = 'paths-test-token';

/** One raw request; the status line and the body of the answer ('' when the server closed without one). */
function raw(port: number, text: string): Promise<{ status: string; body: string }> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(text));
    let out = '';
    socket.on('data', (d) => (out += String(d)));
    socket.on('error', () => socket.destroy());
    socket.on('close', () => {
      const [head = '', ...body] = out.split('\r\n\r\n');
      resolve({ status: head.split('\r\n')[0] ?? '', body: body.join('\r\n\r\n') });
    });
    socket.setTimeout(5_000, () => socket.destroy());
  });
}

function get(target: string, host = '127.0.0.1'): string {
  return `GET ${target} HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${TOKEN}\r\nConnection: close\r\n\r\n`;
}

/** An application that answers `port URL` for every request. */
async function echoApp(session: TestSession, port: number): Promise<void> {
  const app = `require('node:http').createServer((q, r) => r.end('APP ${port} ' + q.url)).listen(${port}, '127.0.0.1', () => console.log('up'));`;
  await session.start(`app-${port}`, [process.execPath, '-e', app]);
  await session.waitFor(
    (all) => all.some((n) => n.method === 'process/output' && n.params['processId'] === `app-${port}`),
    20_000,
    'app listening',
  );
}

test('preview proxy: traversal stays inside the port, absolute URIs and CONNECT reach nothing', {
  timeout: 90_000,
}, async (t) => {
  const server = await startServer({ flags: ['--token', TOKEN, '--preview-host', 'preview.test'] });
  t.after(() => server.close());
  const open = () => TestSession.open(server.url, { session: { previewPorts: true } }, { token: TOKEN });
  const [mine, other] = await Promise.all([open(), open()]);
  t.after(() => Promise.all([mine.close(), other.close()]));
  const port = 25_000 + Math.floor(Math.random() * 1000);
  const otherPort = port + 1;
  await echoApp(mine, port);
  await echoApp(other, otherPort);
  for (const [s, p] of [
    [mine, port],
    [other, otherPort],
  ] as const) {
    const exposed = await requestJson<PreviewAnswer>(
      `${server.httpUrl}/v1/sessions/${s.sessionId}/ports`,
      'POST',
      { port: p },
      TOKEN,
    );
    assert.equal(exposed.status, 201);
  }
  const serverPort = Number(new URL(server.httpUrl).port);
  const base = `/v1/sessions/${mine.sessionId}/ports/${port}/`;
  const escapes = [
    '../../../../v1/sessions',
    `../../../${other.sessionId}/ports/${otherPort}/`,
    '%2e%2e/%2e%2e/%2e%2e/%2e%2e/v1/sessions',
    '..%2f..%2f..%2f..%2fv1%2fsessions',
    `.%2e/.%2e/.%2e/${other.sessionId}/ports/${otherPort}/`,
  ];
  for (const rest of escapes) {
    const r = await raw(serverPort, get(`${base}${rest}`));
    assert.equal(r.status, 'HTTP/1.1 200 OK', rest);
    assert.equal(r.body, `APP ${port} /${rest}`, `only the port's own application answers ${rest}`);
  }
  // The wildcard host: the same, at its root.
  const host = `p${port}-${mine.sessionId}.preview.test`;
  for (const rest of ['/../../v1/sessions', `/../../../${other.sessionId}/ports/${otherPort}/`]) {
    const r = await raw(serverPort, get(rest, host));
    assert.equal(r.body, `APP ${port} ${rest}`, rest);
  }

  // Absolute-form targets: the server never connects to what they name.
  for (const target of [
    `http://127.0.0.1:${otherPort}/`,
    `http://evil.example${base}`,
    `http://${host}/x`,
    `http://127.0.0.1:${serverPort}${base}`,
  ]) {
    const r = await raw(serverPort, get(target));
    assert.doesNotMatch(r.body, /^APP /, `${target} reached an application: ${r.status} ${r.body}`);
  }
  // CONNECT: no tunnel to the port (the server closes the connection).
  const tunnel = await raw(
    serverPort,
    `CONNECT 127.0.0.1:${otherPort} HTTP/1.1\r\nHost: 127.0.0.1:${otherPort}\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`,
  );
  assert.doesNotMatch(tunnel.status, / 200 /);
  assert.doesNotMatch(tunnel.body, /APP/);
});
