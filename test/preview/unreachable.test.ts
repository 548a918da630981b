/**
 * A preview of an exposed port that nothing listens on, on both backends: every request, plain
 * or upgrade, is answered 502 naming the reason, and the server (its other sessions, its
 * commands) carries on. On the docker backend the port's stream opened and then failed, an
 * error nobody listened to that ended the whole server.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test } from 'node:test';
import type { PreviewAnswer } from '../../src/protocol/index.ts';
import { dockerTestOptions } from '../docker/engine.ts';
import { requestJson } from '../http/helpers.ts';
import { BACKENDS } from '../support/backends.ts';
import type { BackendKind } from '../support/harness.ts';

const { sessionFor, startServer } = await import('../support/harness.ts');

/** An upgrade request on a raw socket; resolves with everything the server sent until it closed. */
function rawUpgrade(base: string, path: string, token: string): Promise<string> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname, () => {
      socket.write(
        `GET ${path} HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${token}\r\nConnection: Upgrade\r\n` +
          'Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
      );
    });
    let got = '';
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (got += d));
    socket.on('close', () => resolve(got));
    socket.on('error', reject);
    socket.setTimeout(30_000, () => socket.destroy(new Error('no answer within 30 s')));
  });
}

for (const backend of BACKENDS) {
  const options = backend === 'docker' ? dockerTestOptions : { timeout: 120_000 };
  test(
    `preview (${backend}): a port nothing listens on is a 502 every time; the server carries on`,
    options,
    async (t) => {
      const server = await startServer({ backend: backend as BackendKind, flags: ['--token', 'tok'] });
      t.after(() => server.close());
      const session = await sessionFor(t, server.url, { session: { previewPorts: true } }, { token: 'tok' });
      const id = session.sessionId;
      const exposed = await requestJson<PreviewAnswer>(
        `${server.httpUrl}/v1/sessions/${id}/ports`,
        'POST',
        { port: 9 },
        'tok',
      );
      assert.equal(exposed.status, 201, JSON.stringify(exposed.body));
      for (let i = 0; i < 5; i++) {
        const r = await requestJson<{ code: string; message: string }>(
          `${server.httpUrl}${exposed.body.path}`,
          'GET',
          undefined,
          'tok',
        );
        assert.equal(r.status, 502, JSON.stringify(r.body));
        assert.equal(r.body.code, 'EXEC_ERR_BACKEND');
        assert.match(r.body.message, /preview port unreachable/);
      }
      for (let i = 0; i < 3; i++) {
        const answer = await rawUpgrade(server.httpUrl, exposed.body.path, 'tok');
        assert.match(answer, /^HTTP\/1\.1 502 /, answer);
        assert.match(answer, /preview port unreachable/);
      }
      const health = await fetch(`${server.httpUrl}/healthz`);
      assert.equal(health.status, 200);
      const still = await session.run('after', ['echo', 'alive']);
      assert.equal(still.stdout, 'alive\n');
    },
  );
}
