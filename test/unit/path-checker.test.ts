/** The file operations' sandbox check (src/sessions/files/path-checker.ts `Checker`): deny-read, trees, writable roots. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { execError } from '../../src/errors.ts';
import type { SessionPolicy } from '../../src/policy/sandbox-policy.ts';
import { Checker, isNotFound, SessionPaths } from '../../src/sessions/files/path-checker.ts';

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

/**
 * A session whose filesystem is a table: `links` maps a path to its canonical form (symlinks
 * resolved), `entries` lists what exists (`link` for a symlink whose target is missing).
 */
function paths(
  policy: Partial<SessionPolicy>,
  links: Record<string, string>,
  entries: Record<string, 'file' | 'link'>,
) {
  const calls: string[] = [];
  const fs = {
    realpath: async (p: string) => {
      calls.push(p);
      // The longest link prefix wins, as when the kernel resolves a path.
      const from = Object.keys(links)
        .filter((l) => p === l || p.startsWith(`${l}/`))
        .sort((a, b) => b.length - a.length)[0];
      return from === undefined ? p : (links[from] as string) + p.slice(from.length);
    },
    stat: async (p: string) => {
      const kind = entries[p];
      if (kind === undefined) throw execError('EXEC_ERR_NOT_FOUND', `${p}: No such file or directory`);
      return {
        isDirectory: false,
        isFile: kind === 'file',
        isSymlink: kind === 'link',
        size: 0,
        createdAtMs: 0,
        modifiedAtMs: 0,
      };
    },
  };
  const session = {
    spec: {
      policy: {
        sandbox: { type: 'workspace-write' },
        denyRead: [],
        approvalPolicy: 'never',
        strictAutoReview: false,
        denialHandling: 'server',
        ...policy,
      },
    },
    backend: { workdir: '/w' },
  };
  return { sp: new SessionPaths(session as never, () => fs as never), calls };
}

test('checker: roots and deny-read paths are compared canonical, spelled forms kept for deny-read', async () => {
  const { sp, calls } = paths(
    { denyRead: ['/w/link-to-secret'] },
    { '/w': '/real/w', '/w/link-to-secret': '/real/secret' },
    {},
  );
  const c = await sp.checker();
  assert.ok(c.sandbox.kind === 'restricted');
  assert.deepEqual(c.sandbox.writableRoots, ['/real/w', '/tmp']);
  assert.deepEqual(c.sandbox.denyRead, ['/w/link-to-secret', '/real/secret']);
  assert.throws(() => c.read('/real/secret/key'), { code: 'EXEC_ERR_FS_DENIED' });
  c.write('/real/w/file');
  const before = calls.length;
  await sp.checker();
  assert.equal(calls.length, before, 'canonical roots are reused for a while');
});

test('checker: full access is unrestricted; a narrowing applies on top', async () => {
  const full = await paths({ sandbox: { type: 'danger-full-access' } }, {}, {}).sp.checker();
  assert.deepEqual(full.sandbox, { kind: 'unrestricted' });
  const narrowed = await paths({}, {}, {}).sp.checker({ writableRoots: [] });
  assert.throws(() => narrowed.write('/w/x'), { message: '/w/x: write denied: the sandbox is read-only' });
});

test('linkPath: the parent canonical, the last component kept', async () => {
  const { sp } = paths({}, { '/w/dir': '/real/dir' }, {});
  assert.equal(await sp.linkPath('/w/dir/link'), '/real/dir/link');
  assert.equal(await sp.linkPath('/'), '/');
});

test('writeTarget: a canonical target; refused when the first existing component is a dangling link', async () => {
  const ok = paths({}, { '/w/l': '/real' }, { '/real': 'file', '/w': 'file' });
  assert.equal(await ok.sp.writeTarget('/w/l/new/file'), '/real/new/file');
  const dangling = paths({}, {}, { '/w/dangling': 'link' });
  await assert.rejects(dangling.sp.writeTarget('/w/dangling/x'), {
    code: 'EXEC_ERR_FS_DENIED',
    message: '/w/dangling: is a dangling symbolic link; refusing to write through it',
  });
  assert.equal(await paths({}, {}, { '/': 'file' }).sp.writeTarget('/nothing/here'), '/nothing/here');
});
