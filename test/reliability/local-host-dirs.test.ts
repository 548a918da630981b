/**
 * L15 (docs/reliability.md): a tenant not allowed `danger-full-access` names host directories only
 * in `--local-host-dirs`. Before, such a tenant could name `/opt/app` (root's: lent, chowned to its
 * sandbox user) or an ordinary user's directory (its commands then ran as that user) as its
 * workdir, a writable root or a Codex working directory. Against the real server process, with
 * a confined tenant and one allowed `danger-full-access`.
 */
import assert from 'node:assert/strict';
import { chmodSync, chownSync, existsSync, mkdirSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { RpcError } from '../../src/client/rpc-connection.ts';
import { openSandboxed, rootSandboxOnly, spawnServer, type ServerProcess } from './support.ts';

const ALICE = 'alice-host-dirs-token';
const OPS = 'ops-host-dirs-token';
/** An ordinary user's uid (nobody): commands on a directory it owns would run as it. */
const NOBODY = 65534;

const forbidden = (field: string) => (err: unknown) =>
  err instanceof RpcError && err.code === 'EXEC_ERR_HOST_DIR_FORBIDDEN' && err.data?.['field'] === field;

describe('host directories of a confined tenant', { ...rootSandboxOnly, timeout: 120_000 }, () => {
  let server: ServerProcess;
  let allowed: string;
  /** Outside the allowed directory: root's, and an ordinary user's. */
  let rootOwned: string;
  let userOwned: string;
  before(async () => {
    allowed = await mkdtemp('/var/tmp/exec-server-hostdirs-');
    chmodSync(allowed, 0o755);
    rootOwned = `/opt/exec-server-hostdirs-${process.pid}`;
    userOwned = await mkdtemp('/var/tmp/exec-server-hostdirs-user-');
    mkdirSync(rootOwned, { recursive: true });
    chownSync(userOwned, NOBODY, NOBODY);
    symlinkSync(rootOwned, `${allowed}/link`);
    mkdirSync(`${allowed}/project`);
    mkdirSync(`${allowed}/codex`);
    server = await spawnServer([
      ...['--tokens', `alice:${ALICE},ops:${OPS}`, '--local-host-dirs', allowed],
      ...['--allowed-sandbox-types', 'workspace-write,read-only,ops:danger-full-access'],
    ]);
  });
  after(async () => {
    server.child.kill('SIGTERM');
    await server.exited;
    for (const dir of [allowed, rootOwned, userOwned]) rmSync(dir, { recursive: true, force: true });
  });

  test('a workdir or writable root outside them is refused, naming the field, and nothing is lent', async () => {
    for (const workdir of [rootOwned, userOwned, `${allowed}/link`, `${allowed}/../${userOwned.split('/').pop()}`])
      await assert.rejects(openSandboxed(server, ALICE, { workdir }), forbidden('session.workdir'), workdir);
    await assert.rejects(
      openSandboxed(server, ALICE, {
        sandbox: { type: 'workspace-write', writableRoots: ['/tmp', allowed, rootOwned] },
      }),
      forbidden('session.sandbox.writableRoots[2]'),
    );
    assert.equal(statSync(rootOwned).uid, 0, 'root keeps its directory');
    assert.equal(statSync(userOwned).uid, NOBODY);
    // Over HTTP the same: 403 with the code.
    const res = await fetch(`${server.url.replace('ws://', 'http://')}/v1/sessions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ALICE}`, 'content-type': 'application/json' },
      body: JSON.stringify({ workdir: rootOwned, sandbox: { type: 'workspace-write' } }),
    });
    assert.equal(res.status, 403);
    const body = (await res.json()) as { code?: string; message?: string };
    assert.equal(body.code, 'EXEC_ERR_HOST_DIR_FORBIDDEN');
    assert.match(body.message ?? '', /--local-host-dirs/);
  });

  test('inside them the tenant works as before', async () => {
    const workdir = `${allowed}/project`;
    const { s } = await openSandboxed(server, ALICE, { workdir });
    const r = await s.run('w', ['sh', '-c', 'echo made > made.txt && cat made.txt']);
    assert.equal(r.stdout, 'made\n');
    assert.ok(existsSync(`${workdir}/made.txt`));
    await s.close();
  });

  test("a Codex client's working directory outside them is not made a workspace", async () => {
    const { s } = await openSandboxed(server, ALICE);
    await s.request('environmentConfig/read', { cwd: rootOwned });
    const r = await s.run('c', ['sh', '-c', `echo x > ${rootOwned}/f 2>/dev/null; echo end`]);
    assert.equal(r.stdout, 'end\n');
    assert.ok(!existsSync(`${rootOwned}/f`), 'the command wrote outside the host directories');
    assert.equal(statSync(rootOwned).uid, 0, 'root keeps its directory');
    // One inside them is, as for any Codex client.
    const inside = `${allowed}/codex`;
    await s.request('environmentConfig/read', { cwd: inside });
    const w = await s.run('d', ['sh', '-c', `echo x > ${inside}/codex.txt && echo ok`]);
    assert.equal(w.stdout, 'ok\n', w.stderr);
    await s.close();
  });

  test('a tenant allowed danger-full-access names any directory', async () => {
    const { s, workdir } = await openSandboxed(server, OPS, { workdir: rootOwned });
    assert.equal(workdir, rootOwned);
    const r = await s.run('o', ['sh', '-c', 'echo ops > ops.txt && cat ops.txt']);
    assert.equal(r.stdout, 'ops\n');
    await s.close();
  });
});
