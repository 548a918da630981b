/** The error registry (src/errors.ts): one status and one JSON-RPC code per code, bodies, and the mappings into it. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  codeOfHttpStatus,
  ERROR_REGISTRY,
  ERROR_STATUSES,
  ExecServerError,
  execError,
  fromErrno,
  httpErrorBody,
  RETRYABLE_CODES,
  RpcCode,
  rpcErrorBody,
  toExecError,
} from '../../src/errors.ts';

test('every code carries its registry status and JSON-RPC code; statuses are listed once, ascending', () => {
  for (const [code, [status, rpc]] of Object.entries(ERROR_REGISTRY)) {
    const e = execError(code as keyof typeof ERROR_REGISTRY, 'm');
    assert.deepEqual([e.code, e.statusCode, e.rpcCode, e.name], [code, status, rpc, 'ExecServerError']);
    assert.ok(e instanceof Error);
    assert.match(code, /^EXEC_ERR_[A-Z_]+$/);
    assert.ok(ERROR_STATUSES.includes(status));
  }
  assert.deepEqual(
    [...ERROR_STATUSES],
    [...new Set(ERROR_STATUSES)].sort((a, b) => a - b),
  );
  for (const code of RETRYABLE_CODES) assert.ok(code in ERROR_REGISTRY, code);
});

test('bodies: HTTP {code, message[, call_id]}; JSON-RPC with our code and the detail in data', () => {
  const cause = new Error('underlying');
  const e = execError('EXEC_ERR_INVALID_PARAMS', 'bad cwd', { cause, detail: { field: 'cwd' } });
  assert.equal(e.cause, cause);
  assert.deepEqual(httpErrorBody(e), { code: 'EXEC_ERR_INVALID_PARAMS', message: 'bad cwd' });
  assert.deepEqual(httpErrorBody(e, { call_id: 'c1' }), {
    code: 'EXEC_ERR_INVALID_PARAMS',
    message: 'bad cwd',
    call_id: 'c1',
  });
  assert.deepEqual(rpcErrorBody(e), {
    code: RpcCode.invalidParams,
    message: 'bad cwd',
    data: { code: 'EXEC_ERR_INVALID_PARAMS', field: 'cwd' },
  });
  const plain = new ExecServerError('EXEC_ERR_NOT_FOUND', 'gone');
  assert.equal(plain.cause, undefined);
  assert.deepEqual(rpcErrorBody(plain).data, { code: 'EXEC_ERR_NOT_FOUND' });
  assert.equal(rpcErrorBody(plain).code, -32004);
});

test('framework statuses map to registry codes; anything else is an invalid request', () => {
  assert.deepEqual([401, 404, 413, 429, 400, 415].map(codeOfHttpStatus), [
    'EXEC_ERR_UNAUTHORIZED',
    'EXEC_ERR_NOT_FOUND',
    'EXEC_ERR_TOO_LARGE',
    'EXEC_ERR_BUSY',
    'EXEC_ERR_INVALID_REQUEST',
    'EXEC_ERR_INVALID_REQUEST',
  ]);
});

test('toExecError keeps ours and wraps anything else as internal, keeping the cause', () => {
  const ours = execError('EXEC_ERR_BUSY', 'busy');
  assert.equal(toExecError(ours), ours);
  const thrown = new RangeError('bad');
  const wrapped = toExecError(thrown);
  assert.deepEqual([wrapped.code, wrapped.message, wrapped.cause], ['EXEC_ERR_INTERNAL', 'bad', thrown]);
  assert.equal(toExecError(42).message, '42');
});

test('fromErrno: ENOENT not found, EACCES/EPERM/EROFS denied with the reason, EISDIR/ELOOP the request, others an fs error', () => {
  const err = (code: string) => Object.assign(new Error(`${code}: x`), { code });
  const cases: Array<[string, string, string]> = [
    ['ENOENT', 'EXEC_ERR_NOT_FOUND', '/a: No such file or directory'],
    ['EACCES', 'EXEC_ERR_FS_DENIED', '/a: Permission denied'],
    ['EPERM', 'EXEC_ERR_FS_DENIED', '/a: Permission denied'],
    ['EROFS', 'EXEC_ERR_FS_DENIED', '/a: Read-only file system'],
    ['EISDIR', 'EXEC_ERR_INVALID_REQUEST', '/a: Is a directory'],
    ['ELOOP', 'EXEC_ERR_INVALID_REQUEST', '/a: Too many levels of symbolic links'],
    ['EIO', 'EXEC_ERR_FS', '/a: EIO: x'],
  ];
  for (const [errno, code, message] of cases) {
    const e = fromErrno(err(errno), '/a');
    assert.deepEqual([e.code, e.message], [code, message], errno);
  }
  const ours = execError('EXEC_ERR_TOO_LARGE', 'big');
  assert.equal(fromErrno(ours, '/a'), ours);
  assert.equal(fromErrno('odd', '/a').message, '/a: odd');
});
