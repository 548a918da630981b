/**
 * A large upload through a preview port, on both backends: 24 MB, three times the unread-stdin
 * budget (8 MiB) of the relay that carries a port's bytes as its stdin, reaches a server in the
 * session whole. The relay's writer waits for room rather than failing (process-stream.ts);
 * before it did, the upload broke past the budget with the relay torn down.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { PreviewAnswer } from '../../src/protocol/index.ts';
import { dockerTestOptions } from '../docker/engine.ts';
import { requestJson } from '../http/helpers.ts';
import { BACKENDS } from '../support/backends.ts';
import type { BackendKind } from '../support/harness.ts';

// Loaded once the engine check above is done (as preview.test.ts does).
const { sessionFor, sleep, startServer } = await import('../support/harness.ts');

const TOKEN = 'upload-token';
const UPLOAD = 24 << 20;
/** A CGI for busybox httpd that answers how many bytes it was sent. */
const COUNT_CGI = '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\nhead -c "$CONTENT_LENGTH" | wc -c\n';

for (const backend of BACKENDS) {
  const options =
    backend === 'docker' ? { ...dockerTestOptions, timeout: dockerTestOptions.timeout + 60_000 } : { timeout: 120_000 };

  test(
    `preview (${backend}): a 24 MB upload through a port reaches the server in the session whole`,
    options,
    async (t) => {
      const server = await startServer({ backend: backend as BackendKind, flags: ['--tokens', `alice:${TOKEN}`] });
      t.after(() => server.close());
      const session = await sessionFor(t, server.url, { session: { previewPorts: true } }, { token: TOKEN });
      const root = String((await session.request('session/info'))['workdir']);
      await session.request('fs/createDirectory', { path: `${root}/www/cgi-bin`, recursive: true });
      const cgi = `${root}/www/cgi-bin/count`;
      await session.request('fs/writeFile', { path: cgi, dataBase64: Buffer.from(COUNT_CGI).toString('base64') });
      assert.equal((await session.run('chmod', ['chmod', '755', cgi])).exited['exitCode'], 0);
      const port = 18_000 + Math.floor(Math.random() * 1000);
      await session.start('httpd', ['busybox', 'httpd', '-f', '-p', `127.0.0.1:${port}`, '-h', `${root}/www`]);
      const exposed = await requestJson<PreviewAnswer>(
        `${server.httpUrl}/v1/sessions/${session.sessionId}/ports`,
        'POST',
        { port },
        TOKEN,
      );
      assert.equal(exposed.status, 201, JSON.stringify(exposed.body));

      const post = (bytes: number): Promise<Response> =>
        fetch(`${server.httpUrl}${exposed.body.path}cgi-bin/count`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/octet-stream' },
          body: Buffer.alloc(bytes, 0x62),
        });
      // The proxy answers 502 until httpd listens.
      for (let i = 0; i < 100 && (await post(1)).status === 502; i++) await sleep(200);
      const answer = await post(UPLOAD);
      assert.equal(`${answer.status} ${(await answer.text()).trim()}`, `200 ${UPLOAD}`);
    },
  );
}
