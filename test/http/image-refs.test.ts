/**
 * Image and snapshot references are checked against the engine's grammar before any engine
 * call (src/protocol/common.ts, IMAGE_REF_PATTERN), on every route: a path such as `../../x`
 * made the engine answer with a redirect that its client followed to another host, an error
 * nobody heard that ended the server.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { dockerTestOptions } from '../docker/engine.ts';
import { BACKENDS } from '../support/backends.ts';
import type { BackendKind } from '../support/harness.ts';
import { serverWithApi } from './helpers.ts';

const BAD = ['../../x', 'UPPER:latest', 'a b', '--help', 'x@sha256:zzz', 'a/../b'];

for (const backend of BACKENDS) {
  const options = backend === 'docker' ? dockerTestOptions : { timeout: 60_000 };
  test(
    `image refs (${backend}): a malformed image or snapshot is a 400, and the server carries on`,
    options,
    async (t) => {
      const api = await serverWithApi(t, { backend: backend as BackendKind, flags: ['--warm-pool', '0'] });
      for (const ref of BAD) {
        for (const body of [{ image: ref }, { snapshot: ref }]) {
          const r = await api('POST', '/v1/sessions', body);
          assert.equal(r.status, 400, `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
          assert.equal(r.body.code, 'EXEC_ERR_INVALID_PARAMS');
        }
        const del = await api('DELETE', `/v1/snapshots/${encodeURIComponent(ref)}`);
        assert.equal(del.status, 400, `DELETE ${ref}: ${JSON.stringify(del.body)}`);
      }
      // The server is still up, and a well-formed reference that does not exist is a 404.
      await new Promise((r) => setTimeout(r, 200));
      assert.equal((await fetch(`${api.server.httpUrl}/healthz`)).status, 200);
      if (backend === 'docker') {
        const missing = await api('DELETE', `/v1/snapshots/sha256:${'0'.repeat(64)}`);
        assert.equal(missing.status, 404, JSON.stringify(missing.body));
      }
    },
  );
}
