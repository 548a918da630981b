/** Wire paths (src/protocol/common.ts `toPath`): absolute paths or local file URIs, never a host, never a NUL. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Compile } from 'typebox/compile';
import { Base64Schema, OneOf, PathSchema, toPath } from '../../src/protocol/common.ts';

test('a path stays as it is; a local file URI becomes its decoded path', () => {
  assert.equal(toPath('/w/a b'), '/w/a b');
  assert.equal(toPath('file:///w/a%20b/%C3%A9'), '/w/a b/é');
  assert.equal(toPath('file://localhost/w/x'), '/w/x');
});

test('a URI naming a host, or a NUL byte in either form, is invalid params', () => {
  assert.throws(() => toPath('file://server/share'), { code: 'EXEC_ERR_INVALID_PARAMS', message: /names a host/ });
  assert.throws(() => toPath('/w/a\0b'), { code: 'EXEC_ERR_INVALID_PARAMS', message: /contains a NUL byte/ });
  assert.throws(() => toPath('file:///w/a%00b'), { code: 'EXEC_ERR_INVALID_PARAMS', message: /NUL byte/ });
});

test('schemas: paths absolute or file URIs; base64 standard; OneOf only its values', () => {
  const path = Compile(PathSchema);
  assert.deepEqual(
    ['/a', 'file:///a', 'a/b', '', 'http://x'].map((p) => path.Check(p)),
    [true, true, false, false, false],
  );
  const b64 = Compile(Base64Schema);
  assert.deepEqual(
    ['', 'aGk=', 'aGk', 'a-b_', 'aGk==='].map((p) => b64.Check(p)),
    [true, true, true, false, false],
  );
  const one = Compile(OneOf(['a', 'b']));
  assert.deepEqual(
    ['a', 'b', 'c', 1].map((v) => one.Check(v)),
    [true, true, false, false],
  );
});
