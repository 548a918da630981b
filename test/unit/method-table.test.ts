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
    .add('process/start', (params) => {
      calls.push(params.env);
      return { processId: params.processId, sandboxType: 'none', sandbox: 'none' };
    })
    .add('initialize', () => ({}) as never, 'none');
  return { t, calls };
}
const run = (t: MethodTable<{ user: string }>, name: string, params: unknown) =>
  (t.get(name) as NonNullable<ReturnType<typeof t.get>>).run(params, { user: 'u' }, new AbortController().signal);

test('registered methods are listed with their gate; unknown names are undefined', () => {
  const { t } = table();
  assert.deepEqual(t.names(), ['fs/writeFile', 'process/signal', 'process/start', 'initialize']);
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
    message: 'invalid params: path: must be an absolute path or a file:// URI, without a NUL byte',
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

test('what execve would cut or misread is refused, naming the field and the key', async () => {
  const { t, calls } = table();
  const start = (extra: Record<string, unknown>) => run(t, 'process/start', { processId: 'p', argv: ['sh'], ...extra });
  // A NUL ends a C string: the command would get less than was sent.
  await assert.rejects(start({ argv: ['echo', 'a\u0000b'] }), {
    message: 'invalid params: argv.1: must not contain a NUL byte (execve would cut the string there)',
  });
  await assert.rejects(start({ env: { X: 'a\u0000b' } }), { detail: { field: 'env.X' } });
  await assert.rejects(start({ cwd: '/tmp\u0000x' }), { detail: { field: 'cwd' } });
  // `=` ends a name early (A=B=x would set A); an empty name is no variable at all.
  await assert.rejects(start({ env: { 'A=B': 'x' } }), {
    message: 'invalid params: env: key "A=B" is not an environment variable name (empty, or with = or a NUL byte)',
  });
  await assert.rejects(start({ env: { '': 'x' } }), { code: 'EXEC_ERR_INVALID_PARAMS' });
  await assert.rejects(start({ envPolicy: { set: { 'B=': 'x' } } }), { detail: { field: 'envPolicy.set' } });
  // Values may hold `=` and anything but NUL; names anything but `=` and NUL.
  await start({ env: { X: 'a=b c\n', 'weird.name-1': 'ok' } });
  assert.deepEqual(calls, [{ X: 'a=b c\n', 'weird.name-1': 'ok' }]);
});
