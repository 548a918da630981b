/** Codex's `sandbox` permissions profile on process/start (src/rpc/methods/codex-sandbox.ts) as a narrowing of the session policy. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { narrowingFromCodexSandbox } from '../../src/rpc/methods/codex-sandbox.ts';

/** A session whose client path `/client/...` is `/w/...` inside it (a cwd alias). */
const session = {
  backend: { workdir: '/w', environment: { tempDir: '/tmp/s1' } },
  mapClientPath: (p: string) => (p.startsWith('/client') ? `/w${p.slice('/client'.length)}` : p),
} as never;
const special = (kind: string, subpath?: string) => ({
  type: 'special',
  value: { kind, ...(subpath === undefined ? {} : { subpath }) },
});

test('no permissions object (full access, or a shape not known): no narrowing', () => {
  assert.equal(narrowingFromCodexSandbox({}, session), undefined);
  assert.equal(narrowingFromCodexSandbox({ permissions: null }, session), undefined);
  assert.equal(narrowingFromCodexSandbox({ permissions: { network: 'enabled' } }, session), undefined);
});

test('a restricted network alone narrows the network only', () => {
  assert.deepEqual(narrowingFromCodexSandbox({ permissions: { network: 'restricted' } }, session), { network: false });
});

test('restricted file system: write entries become writable roots, none entries deny-read, read entries nothing', () => {
  const n = narrowingFromCodexSandbox(
    {
      workspaceRoots: ['/client/', 'file:///other'],
      permissions: {
        network: 'restricted',
        file_system: {
          type: 'restricted',
          entries: [
            { access: 'write', path: special('project_roots') },
            { access: 'write', path: special('slash_tmp') },
            { access: 'write', path: special('tmpdir') },
            { access: 'read', path: special('root') },
            { access: 'none', path: special('project_roots', '.env') },
            { access: 'none', path: { type: 'path', path: '/client/secret' } },
            { access: 'write', path: { type: 'special', value: { kind: 'unknown' } } },
            { access: 'write', path: 'not an object' },
            'not an entry',
          ],
        },
      },
    },
    session,
  );
  assert.deepEqual(n, {
    writableRoots: ['/w', '/other', '/tmp', '/tmp/s1'],
    denyRead: ['/w/.env', '/other/.env', '/w/secret'],
    network: false,
  });
});

test('without workspaceRoots the session workdir is the project root; enabled network is not narrowed', () => {
  const n = narrowingFromCodexSandbox(
    {
      permissions: {
        network: 'enabled',
        file_system: { type: 'restricted', entries: [{ access: 'write', path: special('project_roots', 'src') }] },
      },
    },
    session,
  );
  assert.deepEqual(n, { writableRoots: ['/w/src'], denyRead: [], network: undefined });
});
