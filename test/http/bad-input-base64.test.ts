/**
 * Invalid base64 is refused, never written as fewer bytes: MCP `write_file` with encoding base64
 * (src/mcp/file-tools.ts) and `process/write` (src/rpc/methods/process-methods.ts) decode as
 * strictly as `fs/writeFile` does and answer EXEC_ERR_INVALID_PARAMS naming the field.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RpcError } from '../../src/client/rpc-connection.ts';
import { readToEnd, sessionFor } from '../support/harness.ts';
import { call, mcpClient, textOf } from '../mcp/helpers.ts';
import { newSession, serverWithApi } from './helpers.ts';

test('MCP write_file: invalid base64 content is refused and the file keeps its content', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api);
  const { client } = await mcpClient(t, api.server.httpUrl);
  const ok = await call(client, 'write_file', { path: 'f.txt', content: 'keep me', session: id });
  assert.equal(ok.isError, undefined, JSON.stringify(ok));
  // "!!!" and "!!!!" (a length that passes the length check) used to write 0 bytes; "aGk" is unpadded.
  for (const content of ['!!!', '!!!!', 'aGk', 'aG=k', 'a-b_']) {
    const r = await call(client, 'write_file', { path: 'f.txt', content, encoding: 'base64', session: id });
    assert.equal(r.isError, true, `${content}: ${JSON.stringify(r)}`);
    assert.equal(r.structuredContent?.['code'], 'EXEC_ERR_INVALID_PARAMS', content);
    assert.match(String(r.structuredContent?.['message']), /content: not valid base64/, content);
  }
  const kept = await call(client, 'read_file', { path: 'f.txt', session: id });
  assert.equal(kept.structuredContent?.['bytes'], 7);
  // Valid base64 still writes, wrapped in lines or not.
  for (const content of ['aGVsbG8=', 'aGVs\nbG8=\n']) {
    const r = await call(client, 'write_file', { path: 'f.txt', content, encoding: 'base64', session: id });
    assert.equal(r.structuredContent?.['bytes'], 5, JSON.stringify(r));
  }
  const read = await call(client, 'read_file', { path: 'f.txt', session: id });
  assert.equal(textOf(read), 'hello');
});

test('process/write: a chunk that is not padded base64 is refused (-32602, field chunk), nothing reaches stdin', async (t) => {
  const api = await serverWithApi(t);
  const s = await sessionFor(t, api.server.url);
  await s.start('cat', ['cat'], { pipeStdin: true });
  for (const chunk of ['a', 'abc', 'aGk']) {
    await assert.rejects(s.request('process/write', { processId: 'cat', chunk }), (err: unknown) => {
      assert.ok(err instanceof RpcError, String(err));
      assert.equal(err.rpcCode, -32602, err.message);
      assert.equal(err.code, 'EXEC_ERR_INVALID_PARAMS');
      assert.equal(err.data?.['field'], 'chunk');
      return true;
    });
  }
  assert.deepEqual(await s.request('process/write', { processId: 'cat', chunk: 'b2s=' }), { status: 'accepted' });
  await s.request('process/closeStdin', { processId: 'cat' });
  // Only the valid chunk arrived: "abc" used to reach cat as two bytes, "aGk" as "hi".
  assert.equal((await readToEnd(s, 'cat')).text, 'ok');
});
