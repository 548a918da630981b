/** The file operations' sandbox check (src/sessions/files/path-checker.ts `Checker`): deny-read, trees, writable roots. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { execError } from '../../src/errors.ts';
import { Checker, isNotFound } from '../../src/sessions/files/path-checker.ts';

const restricted = (writableRoots: string[], denyRead: string[]) =>
  new Checker({ kind: 'restricted', writableRoots, denyRead, network: false }, 'workspace-write');

test('read: a deny-read path or anything under it is refused with the path in the detail', () => {
  const c = restricted(['/w'], ['/w/secret']);
  c.read('/w/file');
  assert.throws(() => c.read('/w/secret/k', 'stat'), {
    code: 'EXEC_ERR_FS_DENIED',
    message: "/w/secret/k: stat denied: the path is on the session's deny-read list",
    detail: { path: '/w/secret/k' },
  });
});

test('readTree: also refuses a tree holding a deny-read path below', () => {
  const c = restricted(['/w'], ['/w/a/secret']);
  c.readTree('/w/b', 'copy');
  assert.throws(() => c.readTree('/w', 'copy'), { message: /\/w: copy denied: the tree contains/ });
});

test('write: inside a writable root only; read-only and outside say which; deny-read first', () => {
  const c = restricted(['/w', '/tmp'], ['/w/secret']);
  c.write('/w/new');
  assert.throws(() => c.write('/etc/passwd'), {
    code: 'EXEC_ERR_FS_DENIED',
    message: '/etc/passwd: write denied: outside the writable roots of the workspace-write sandbox (/w, /tmp)',
  });
  assert.throws(() => c.write('/w/secret/x'), { message: /write denied: the path is on the session's deny-read list/ });
  assert.throws(() => restricted([], []).write('/w/x'), { message: '/w/x: write denied: the sandbox is read-only' });
  new Checker({ kind: 'unrestricted' }, 'danger-full-access').write('/anything');
});

test('isNotFound: only the registry not-found', () => {
  assert.equal(isNotFound(execError('EXEC_ERR_NOT_FOUND', 'x')), true);
  assert.equal(isNotFound(execError('EXEC_ERR_FS', 'x')), false);
  assert.equal(isNotFound(Object.assign(new Error('x'), { code: 'ENOENT' })), false);
});
