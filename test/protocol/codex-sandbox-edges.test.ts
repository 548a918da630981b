/**
 * Codex's `sandbox` permissions profile with entries that name no place, or a place outside
 * what they claim (src/rpc/methods/codex-sandbox.ts, docs/protocol.md `process/start`): refused
 * before anything runs with EXEC_ERR_INVALID_PARAMS naming the entry, on `process/start` and on
 * the `fs/*` calls, instead of being left out of the sandbox (a relative `none` path) or failing
 * it with the sandbox's own message (a `..` subpath; a `none` entry over the workspace, on the
 * root or on /tmp holding it). The profile the Codex CLI sends (read root, write the project
 * roots, `/tmp` and `$TMPDIR`, read carve-outs by subpath) still applies, and so does a `none`
 * entry by subpath. Against a real server on the local backend.
 */
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import type { RpcError } from '../../src/client/rpc-connection.ts';
import { serverFor, sessionFor, type TestSession } from '../support/harness.ts';

const ENTRIES = 'sandbox.permissions.file_system.entries';

const pathEntry = (access: string, path: string) => ({ access, path: { type: 'path', path } });
const special = (access: string, kind: string, subpath?: string) => ({
  access,
  path: { type: 'special', value: { kind, ...(subpath === undefined ? {} : { subpath }) } },
});

/** A profile as the Codex CLI builds it (workspace-write), with `extra` entries after its own. */
function codexProfile(workdir: string, extra: readonly unknown[] = [], roots: readonly string[] = [workdir]) {
  const carveOut = (subpath: string) => ({
    ...special('read', 'project_roots', subpath),
    missing_path_behavior: 'skip',
  });
  return {
    permissions: {
      type: 'managed',
      file_system: {
        type: 'restricted',
        entries: [
          special('read', 'root'),
          special('write', 'project_roots'),
          special('write', 'slash_tmp'),
          special('write', 'tmpdir'),
          carveOut('.git'),
          carveOut('.agents'),
          carveOut('.codex'),
          ...extra,
        ],
      },
      network: 'restricted',
    },
    cwd: `file://${workdir}`,
    workspaceRoots: roots.map((r) => (r.startsWith('/') ? `file://${r}` : r)),
    windowsSandboxLevel: 'disabled',
    useLegacyLandlock: false,
  };
}

async function refused(call: Promise<unknown>, field: string, why: RegExp): Promise<void> {
  await assert.rejects(call, (e: RpcError) => {
    assert.equal(e.code, 'EXEC_ERR_INVALID_PARAMS', e.message);
    assert.equal(e.rpcCode, -32602);
    assert.equal(e.data?.['field'], field);
    assert.ok(e.message.includes(field), `the message names the entry: ${e.message}`);
    assert.match(e.message, why);
    return true;
  });
}

async function session(t: Parameters<typeof serverFor>[0]): Promise<{ s: TestSession; workdir: string }> {
  const server = await serverFor(t);
  const s = await sessionFor(t, server.url);
  const info = await s.request<{ workdir: string }>('session/info', {});
  return { s, workdir: info.workdir };
}

test('entries that name no place, or leave the project root, refuse process/start before it runs', async (t) => {
  const { s, workdir } = await session(t);
  const start = (id: string, extra: readonly unknown[], roots?: readonly string[]) =>
    s.start(id, ['sh', '-c', 'echo ran > ran-$0', id], { sandbox: codexProfile(workdir, extra, roots) });
  const at = 7; // the first entry after the profile's own seven
  await refused(start('rel', [pathEntry('none', 'relative/x')]), `${ENTRIES}[${at}].path.path`, /not an absolute path/);
  await refused(start('empty', [pathEntry('none', '')]), `${ENTRIES}[${at}].path.path`, /not an absolute path/);
  await refused(start('wrel', [pathEntry('write', 'rel')]), `${ENTRIES}[${at}].path.path`, /not an absolute path/);
  await refused(start('dots', [pathEntry('none', '/tmp/../etc')]), `${ENTRIES}[${at}].path.path`, /\.\. segment/);
  await refused(
    start('up', [special('none', 'project_roots', '../../..')]),
    `${ENTRIES}[${at}].path.value.subpath`,
    /leaves the project root/,
  );
  await refused(
    start('abs', [special('none', 'project_roots', '/etc')]),
    `${ENTRIES}[${at}].path.value.subpath`,
    /relative to the project root/,
  );
  await refused(start('uri', [pathEntry('none', 'file:///%E0')]), `${ENTRIES}[${at}].path.path`, /./);
  await refused(start('root', [], ['relative-root']), 'sandbox.workspaceRoots[0]', /not an absolute path/);
  await refused(start('rooturi', [], ['file:///%ZZ']), 'sandbox.workspaceRoots[0]', /./);
  // Nothing ran, and no process id was taken.
  const list = await s.request<{ processes: unknown[] }>('process/list', {});
  assert.deepEqual(list.processes, []);
});

test('a none entry over the workspace (the root, /tmp holding it, the project root) refuses the start', async (t) => {
  const { s, workdir } = await session(t);
  // The harness's workspaces lie under /tmp: `none` on slash_tmp covers this one.
  assert.ok(workdir.startsWith('/tmp/'), workdir);
  const start = (id: string, extra: readonly unknown[]) =>
    s.start(id, ['sh', '-c', 'echo ran'], { cwd: workdir, sandbox: codexProfile(workdir, extra) });
  const field = `${ENTRIES}[7].path`;
  await refused(start('root', [special('none', 'root')]), field, /none entry on \/ covers the project root/);
  await refused(start('slash', [pathEntry('none', '/')]), field, /none entry on \/ covers/);
  await refused(start('tmp', [special('none', 'slash_tmp')]), field, /none entry on \/tmp covers the project root/);
  await refused(start('proj', [special('none', 'project_roots')]), field, /covers the project root/);
  await refused(
    s.request('fs/readFile', { path: join(workdir, 'x'), sandbox: codexProfile(workdir, [special('none', 'root')]) }),
    field,
    /covers the project root/,
  );
  const list = await s.request<{ processes: unknown[] }>('process/list', {});
  assert.deepEqual(list.processes, []);
});

test('the fs calls refuse the same entries', async (t) => {
  const { s, workdir } = await session(t);
  await writeFile(join(workdir, 'f.txt'), 'data');
  await refused(
    s.request('fs/readFile', {
      path: join(workdir, 'f.txt'),
      sandbox: codexProfile(workdir, [special('none', 'project_roots', '..')]),
    }),
    `${ENTRIES}[7].path.value.subpath`,
    /leaves the project root/,
  );
  await refused(
    s.request('fs/writeFile', {
      path: join(workdir, 'g.txt'),
      dataBase64: 'eA==',
      sandbox: codexProfile(workdir, [pathEntry('write', 'sub')]),
    }),
    `${ENTRIES}[7].path.path`,
    /not an absolute path/,
  );
});

test("the Codex CLI's own profile still runs; a none entry by subpath still denies reading", async (t) => {
  const { s, workdir } = await session(t);
  await mkdir(join(workdir, '.secret'));
  await writeFile(join(workdir, '.secret', 'key'), 'k');
  await writeFile(join(workdir, 'open.txt'), 'open');
  const plain = await s.run('plain', ['sh', '-c', 'cat open.txt; echo x > made.txt; echo ok'], {
    cwd: workdir,
    sandbox: codexProfile(workdir),
  });
  assert.equal(plain.exited['exitCode'], 0, plain.stderr);
  assert.equal(plain.stdout, 'openok\n');
  const denied = await s.run('denied', ['sh', '-c', 'cat .secret/key; echo "exit=$?"'], {
    cwd: workdir,
    sandbox: codexProfile(workdir, [special('none', 'project_roots', '.secret')]),
  });
  assert.doesNotMatch(denied.stdout, /^k/, 'the denied file was not read');
  assert.match(denied.stdout, /exit=[1-9]/);
});
