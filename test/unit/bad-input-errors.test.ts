/**
 * The two places bad input turns into registry errors: `toPath` / `toFieldPath` for malformed
 * file URIs (src/protocol/common.ts) and `fromErrno` for the errnos that are the client's mistake
 * (src/errors.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fromErrno } from '../../src/errors.ts';
import { toFieldPath, toPath } from '../../src/protocol/common.ts';

test('a file URI that does not parse or decode is invalid params quoting it; with a field, naming it', () => {
  for (const uri of ['file:///%ZZ', 'file:///%E0%A4%A', 'file://[::1/x', 'file:///a%']) {
    assert.throws(
      () => toPath(uri),
      (err: { code?: string; message?: string; detail?: unknown }) => {
        assert.equal(err.code, 'EXEC_ERR_INVALID_PARAMS', uri);
        assert.equal(
          err.message,
          `${JSON.stringify(uri)} is not a valid file URI${uri.includes('[') ? '' : ' (malformed percent-encoding)'}`,
        );
        assert.equal(err.detail, undefined);
        return true;
      },
    );
    assert.throws(
      () => toFieldPath(uri, 'cwd'),
      (err: { code?: string; message?: string; detail?: unknown }) => {
        assert.equal(err.code, 'EXEC_ERR_INVALID_PARAMS', uri);
        assert.ok(err.message?.startsWith(`cwd: ${JSON.stringify(uri)} is not a valid file URI`), err.message);
        assert.deepEqual(err.detail, { field: 'cwd' });
        return true;
      },
    );
  }
  assert.throws(() => toFieldPath('file://host/x', 'path'), {
    message: /^path: file URI file:\/\/host\/x names a host/,
  });
  assert.equal(toFieldPath('file:///w/%C3%A9', 'cwd'), '/w/é');
});

test('fromErrno: ENOTDIR and EEXIST are invalid requests, ENAMETOOLONG invalid params, cp refusals invalid requests', () => {
  const err = (code: string, message = `${code}: x`) => Object.assign(new Error(message), { code });
  const cases: Array<[string, string, string]> = [
    ['ENOTDIR', 'EXEC_ERR_INVALID_REQUEST', '/a: Not a directory'],
    ['EEXIST', 'EXEC_ERR_INVALID_REQUEST', '/a: File exists'],
    ['ENAMETOOLONG', 'EXEC_ERR_INVALID_PARAMS', '/a: File name too long'],
  ];
  for (const [errno, code, message] of cases) {
    const e = fromErrno(err(errno), '/a');
    assert.deepEqual([e.code, e.message, e.detail], [code, message, { errno }], errno);
  }
  const cp = fromErrno(err('ERR_FS_CP_EINVAL', 'src and dest cannot be the same'), '/a');
  assert.deepEqual([cp.code, cp.message], ['EXEC_ERR_INVALID_REQUEST', '/a: src and dest cannot be the same']);
  assert.equal(fromErrno(err('EIO'), '/a').code, 'EXEC_ERR_FS');
});
