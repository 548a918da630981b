/**
 * Ways out of a local session's sandbox that the policy's own paths opened (docs/reliability.md,
 * cases L10-L14): a deny-read file renamed out of its covered path, a session spec that names
 * the server's workspace root, fs calls writing as root where the sandbox user cannot, a
 * deny-read path spelled so that the sandbox missed it, and one spelled through a removable link.
 * Against the real server process with two tenants restricted to sandboxed types.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { RpcError } from '../../src/client/rpc-connection.ts';
import type { TestSession, ProcessResult } from '../support/harness.ts';
import { openSandboxed, rootSandboxOnly, spawnServer, type ServerProcess } from './support.ts';

const TA = 'tenant-a-escape-token';
const TB = 'tenant-b-escape-token';

let n = 0;
const sh = (s: TestSession, script: string): Promise<ProcessResult> => s.run(`e${n++}`, ['sh', '-c', script]);

const refused = (code: string) => (err: unknown) => err instanceof RpcError && err.code === code;

describe('local sandbox escapes through the policy paths', { ...rootSandboxOnly, timeout: 180_000 }, () => {
  let server: ServerProcess;
  before(async () => {
    server = await spawnServer([
      '--tokens',
      `alice:${TA},bob:${TB}`,
      '--allowed-sandbox-types',
      'workspace-write,read-only',
      // The directories these cases name: what each is checked against here lies past that gate
      // (host-dirs.ts; local-host-dirs.test.ts).
      '--local-host-dirs',
      '/var/tmp,/etc,/tmp',
    ]);
  });
  after(async () => {
    server.child.kill('SIGTERM');
    await server.exited;
  });

  test('L10 a deny-read file cannot be renamed out of its covered path by moving its parent', async () => {
    const workdir = await mkdtemp('/var/tmp/exec-server-escape-');
    mkdirSync(`${workdir}/config/keys`, { recursive: true });
    writeFileSync(`${workdir}/config/keys/api`, 'TOP-SECRET\n');
    try {
      const { s } = await openSandboxed(server, TA, { workdir, denyRead: [`${workdir}/config/keys/api`] });
      const moved = await sh(s, 'mv config/keys moved 2>/dev/null; mv config cfg 2>/dev/null; echo done');
      assert.equal(moved.stdout, 'done\n');
      // A later command gets a sandbox of its own, built from the host's view of the paths.
      const read = await sh(s, 'cat moved/api cfg/keys/api config/keys/api 2>/dev/null; echo end');
      assert.equal(read.stdout, 'end\n', 'the denied file was read under another name');
      assert.equal(readFileSync(`${workdir}/config/keys/api`, 'utf8'), 'TOP-SECRET\n', 'still where it was');
      // The parents stay usable as directories of the workspace.
      const write = await sh(s, 'echo x > config/keys/other && echo x > config/note && echo written');
      assert.equal(write.stdout, 'written\n');
      await s.close();
    } finally {
      rmSync(workdir, { recursive: true, force: true });
    }
  });

  test('L13 a deny-read path is covered however it is spelled (a trailing slash, `..` over a missing directory)', async () => {
    const workdir = await mkdtemp('/var/tmp/exec-server-escape-');
    writeFileSync(`${workdir}/.env`, 'API_KEY=1\n');
    writeFileSync(`${workdir}/token`, 'TOKEN=2\n');
    try {
      const denyRead = [`${workdir}/.env/`, `${workdir}/missing/../token`];
      const { s } = await openSandboxed(server, TA, { workdir, denyRead });
      const r = await sh(s, 'cat .env token 2>/dev/null; echo end');
      assert.equal(r.stdout, 'end\n', 'a denied file was read by a command');
      for (const path of [`${workdir}/.env`, `${workdir}/token`])
        await assert.rejects(s.request('fs/readFile', { path }), refused('EXEC_ERR_FS_DENIED'), path);
      await s.close();
    } finally {
      rmSync(workdir, { recursive: true, force: true });
    }
  });

  test('L14 a deny-read path spelled through a symlink stays covered once the command removes the link', async () => {
    const workdir = await mkdtemp('/var/tmp/exec-server-escape-');
    mkdirSync(`${workdir}/real`);
    writeFileSync(`${workdir}/real/key`, 'TOP-SECRET\n');
    symlinkSync('real', `${workdir}/link`);
    try {
      const { s } = await openSandboxed(server, TA, { workdir, denyRead: [`${workdir}/link/key`] });
      // The link is the sandbox user's to remove: the covered place must not go with it.
      const same = await sh(s, 'rm link && cat real/key 2>/dev/null; echo end');
      assert.equal(same.stdout, 'end\n', 'the denied file was read once the link was gone');
      assert.ok(!existsSync(`${workdir}/link`), 'the command removed the link');
      const path = `${workdir}/real/key`;
      await assert.rejects(s.request('fs/readFile', { path }), refused('EXEC_ERR_FS_DENIED'), path);
      const next = await sh(s, 'cat real/key 2>/dev/null; echo end');
      assert.equal(next.stdout, 'end\n', 'the denied file was read by a later command');
      await assert.rejects(s.request('fs/readFile', { path }), refused('EXEC_ERR_FS_DENIED'), path);
      assert.equal(readFileSync(path, 'utf8'), 'TOP-SECRET\n', 'still where it was');
      await s.close();
    } finally {
      rmSync(workdir, { recursive: true, force: true });
    }
  });

  test("L11 a session spec cannot take the workspace root, or another tenant's workspace, as its own", async () => {
    const b = await openSandboxed(server, TB);
    assert.equal((await sh(b.s, 'echo mine > mine.txt && echo ok')).stdout, 'ok\n');
    const bOwner = statSync(b.workdir).uid;
    for (const workdir of [server.workspaceRoot, b.workdir, `${server.workspaceRoot}/.tmp`, `${b.workdir}/../x`]) {
      await assert.rejects(openSandboxed(server, TA, { workdir }), refused('EXEC_ERR_INVALID_PARAMS'), workdir);
    }
    // As an extra writable root it is not handed to A's user either.
    const a = await openSandboxed(server, TA, {
      sandbox: { type: 'workspace-write', writableRoots: [server.workspaceRoot] },
    });
    const r = await sh(
      a.s,
      `cat '${b.workdir}/mine.txt' 2>/dev/null; echo x > '${b.workdir}/pwned' 2>/dev/null; echo end`,
    );
    assert.equal(r.stdout, 'end\n');
    assert.equal(statSync(b.workdir).uid, bOwner, "B's workspace still belongs to B's user");
    assert.equal(statSync(`${b.workdir}/mine.txt`).uid, bOwner);
    assert.equal((await sh(b.s, 'cat mine.txt')).stdout, 'mine\n');
    // B itself may open another session on its own workspace (a client may share one directory).
    const b2 = await openSandboxed(server, TB, { workdir: b.workdir });
    assert.equal((await sh(b2.s, 'cat mine.txt')).stdout, 'mine\n');
    await b2.s.close();
    await a.s.close();
    await b.s.close();
  });

  test('L12 fs calls write only where the sandbox user could: not into a system directory named as a root', async () => {
    const probe = `/etc/exec-server-escape-${process.pid}`;
    try {
      const a = await openSandboxed(server, TA, { sandbox: { type: 'workspace-write', writableRoots: ['/etc'] } });
      const data = Buffer.from('root-owned\n').toString('base64');
      await assert.rejects(
        a.s.request('fs/writeFile', { path: probe, dataBase64: data }),
        refused('EXEC_ERR_FS_DENIED'),
      );
      await assert.rejects(a.s.request('fs/createDirectory', { path: probe }), refused('EXEC_ERR_FS_DENIED'));
      await assert.rejects(
        a.s.request('fs/copy', { sourcePath: '/etc/hostname', destinationPath: probe, recursive: false }),
        refused('EXEC_ERR_FS_DENIED'),
      );
      await assert.rejects(a.s.request('fs/remove', { path: '/etc/hostname' }), refused('EXEC_ERR_FS_DENIED'));
      assert.ok(!existsSync(probe) && existsSync('/etc/hostname'));
      // Its own workspace and /tmp are written as before, by fs calls and commands alike.
      await a.s.request('fs/writeFile', { path: `${a.workdir}/f`, dataBase64: data });
      await a.s.request('fs/writeFile', { path: '/tmp/f', dataBase64: data });
      const own = await sh(a.s, 'cat f /tmp/f && rm f /tmp/f && echo removed');
      assert.equal(own.stdout, 'root-owned\nroot-owned\nremoved\n');
      await a.s.close();
      const b = await openSandboxed(server, TB, { workdir: '/etc' });
      await assert.rejects(
        b.s.request('fs/writeFile', { path: probe, dataBase64: data }),
        refused('EXEC_ERR_FS_DENIED'),
      );
      assert.ok(!existsSync(probe));
      await b.s.close();
    } finally {
      rmSync(probe, { recursive: true, force: true });
    }
  });
});
