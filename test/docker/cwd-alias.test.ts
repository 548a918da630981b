/** Docker: a client working directory missing from the container is mapped onto the workspace; a missing workspace subdirectory is not. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startServer, TestSession } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';

test('client cwd aliases the workspace; a typo inside the workspace stays an error', dockerTestOptions, async (t) => {
  const server = await startServer({ backend: 'docker' });
  t.after(() => server.close());
  const s = await TestSession.open(server.url);
  t.after(() => s.close());
  const info = await s.request<Record<string, unknown>>('session/info', {});
  const workdir = String(info['workdir']);
  const r = await s.run('alias', ['sh', '-c', 'pwd; echo hi > made-here.txt'], { cwd: 'file:///home/dev/project' });
  assert.equal(r.stdout, '/home/dev/project\n');
  const read = await s.request<Record<string, unknown>>('fs/readFile', { path: `${workdir}/made-here.txt` });
  assert.equal(Buffer.from(String(read['dataBase64']), 'base64').toString(), 'hi\n');
  const viaAlias = await s.request<Record<string, unknown>>('fs/readFile', {
    path: 'file:///home/dev/project/made-here.txt',
  });
  assert.equal(Buffer.from(String(viaAlias['dataBase64']), 'base64').toString(), 'hi\n');
  await assert.rejects(
    s.start('typo', ['pwd'], { cwd: `${workdir}/no-such-dir` }),
    (err: { code?: string }) => err.code === 'EXEC_ERR_SPAWN_FAILED',
  );
});
