/** JSON-RPC method table (src/rpc/method-table.ts): params validated at the edge, errors naming the field. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MethodTable } from '../../src/rpc/method-table.ts';

function table() {
  const calls: unknown[] = [];
  const t = new MethodTable<{ user: string }>()
    .add('fs/writeFile', (params, ctx) => {
      calls.push([params.path, ctx.user]);
      return {};
    })
    .add('process/signal', () => ({}))
    .add('initialize', () => ({}) as never, 'none');
  return { t, calls };
}
const run = (t: MethodTable<{ user: string }>, name: string, params: unknown) =>
  (t.get(name) as NonNullable<ReturnType<typeof t.get>>).run(params, { user: 'u' }, new AbortController().signal);

test('registered methods are listed with their gate; unknown names are undefined', () => {
  const { t } = table();
  assert.deepEqual(t.names(), ['fs/writeFile', 'process/signal', 'initialize']);
  assert.equal(t.get('fs/writeFile')?.requires, 'initialized');
  assert.equal(t.get('initialize')?.requires, 'none');
  assert.equal(t.get('nope'), undefined);
});

test('valid params reach the handler with the context', async () => {
  const { t, calls } = table();
  assert.deepEqual(await run(t, 'fs/writeFile', { path: '/w/a', dataBase64: 'aGk=' }), {});
  assert.deepEqual(calls, [['/w/a', 'u']]);
});

test('a missing field is named, with its parent path', async () => {
  const { t, calls } = table();
  await assert.rejects(run(t, 'fs/writeFile', { path: '/w/a' }), {
    code: 'EXEC_ERR_INVALID_PARAMS',
    message: 'invalid params: missing field dataBase64',
    detail: { field: 'dataBase64' },
  });
  assert.deepEqual(calls, [], 'the handler never ran');
});

test('our patterns are said in words; other failures name the field', async () => {
  const { t } = table();
  await assert.rejects(run(t, 'fs/writeFile', { path: 'relative', dataBase64: '' }), {
    message: 'invalid params: path: must be an absolute path or a file:// URI',
    detail: { field: 'path' },
  });
  await assert.rejects(run(t, 'fs/writeFile', { path: '/a', dataBase64: 'not base64!' }), {
    message: 'invalid params: dataBase64: must be standard base64',
  });
  await assert.rejects(run(t, 'process/signal', { processId: 'p', signal: 'SIGSTOP' }), {
    code: 'EXEC_ERR_INVALID_PARAMS',
    detail: { field: 'signal' },
  });
  await assert.rejects(run(t, 'process/signal', 'not an object'), { code: 'EXEC_ERR_INVALID_PARAMS' });
});
