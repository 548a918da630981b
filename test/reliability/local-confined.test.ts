/**
 * Ways a tenant confined by `--local-host-dirs` (no `danger-full-access`) still reached a host
 * directory outside them, or a root-only file (docs/reliability.md, L16-L20): a path it named
 * inside them that leads out through a symlink its commands made in a directory lent to them
 * (swapped in after the path joined, or before it was named), a root's directory below one its
 * user owns, a command's cwd on the host's /tmp, and a recursive `fs/copy` of an open directory
 * holding a closed file. Before, the server lent (chowned) or copied out what the path led to.
 * Against the real server process.
 */
import assert from 'node:assert/strict';
import { chmodSync, chownSync, existsSync, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { relative } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { RpcError } from '../../src/client/rpc-connection.ts';
import type { ProcessResult, TestSession } from '../support/harness.ts';
import { openSandboxed, rootSandboxOnly, spawnServer, type ServerProcess } from './support.ts';

const ALICE = 'alice-confined-token';

let n = 0;
const sh = (s: TestSession, script: string, extra: Record<string, unknown> = {}): Promise<ProcessResult> =>
  s.run(`c${n++}`, ['sh', '-c', script], extra);

const refused = (code: string) => (err: unknown) => err instanceof RpcError && err.code === code;

/** A start's Codex profile allowing writes to `path` only. */
const writeOnly = (path: string) => ({
  permissions: {
    type: 'managed',
    file_system: { type: 'restricted', entries: [{ access: 'write', path: { type: 'path', path } }] },
  },
});

describe('a confined tenant stays in its host directories', { ...rootSandboxOnly, timeout: 120_000 }, () => {
  let server: ServerProcess;
  let allowed: string;
  /** Root's, outside the allowed directory: what the tenant must never write in nor have chowned. */
  let outside: string;
  before(async () => {
    allowed = await mkdtemp('/var/tmp/exec-server-confined-');
    chmodSync(allowed, 0o755);
    outside = `/opt/exec-server-confined-${process.pid}`;
    server = await spawnServer([
      ...['--tokens', `alice:${ALICE}`, '--local-host-dirs', allowed],
      ...['--allowed-sandbox-types', 'workspace-write,read-only'],
    ]);
  });
  after(async () => {
    server.child.kill('SIGTERM');
    await server.exited;
    for (const dir of [allowed, outside]) rmSync(dir, { recursive: true, force: true });
  });

  /** A project directory in the allowed one, and a directory of root's outside it holding `y/keep`. */
  const places = (name: string): { project: string; target: string } => {
    const target = `${outside}/${name}`;
    mkdirSync(`${target}/y`, { recursive: true });
    writeFileSync(`${target}/y/keep`, 'root\n');
    mkdirSync(`${allowed}/${name}`);
    return { project: `${allowed}/${name}`, target };
  };
  const untouched = (target: string): void => {
    assert.ok(!existsSync(`${target}/y/pwned`), 'the tenant wrote outside its host directories');
    assert.equal(statSync(`${target}/y`).uid, 0, 'root keeps its directory');
    assert.equal(statSync(`${target}/y/keep`).uid, 0, 'root keeps its file');
  };

  test('L16 a Codex working directory re-pointed through a symlink after it joined is not lent', async () => {
    const { project, target } = places('l16');
    const { s } = await openSandboxed(server, ALICE);
    await s.request('environmentConfig/read', { cwd: project });
    const made = await sh(s, `mkdir -p ${project}/x/y && echo made`);
    assert.equal(made.stdout, 'made\n', made.stderr);
    await s.request('environmentConfig/read', { cwd: `${project}/x/y` });
    const ok = await sh(s, `echo x > ${project}/x/y/mine && echo written`);
    assert.equal(ok.stdout, 'written\n', 'a directory of the tenant stays writable');
    // A relative link: the sandbox resolves it in its own view of / too.
    const swapped = await sh(s, `cd ${project} && mv x x.old && ln -s ${relative(project, target)} x && echo swapped`);
    assert.equal(swapped.stdout, 'swapped\n', swapped.stderr);
    const r = await sh(s, `echo x > ${project}/x/y/pwned 2>/dev/null; echo end`);
    untouched(target);
    assert.equal(r.stdout, 'end\n', r.stderr);
    await s.close();
    untouched(target);
  });

  test('L17 a write entry of a start spelled through a symlink to outside is not lent', async () => {
    const { project, target } = places('l17');
    const { s } = await openSandboxed(server, ALICE);
    await s.request('environmentConfig/read', { cwd: project });
    const made = await sh(s, `ln -s ${relative(project, target)} ${project}/x && echo made`);
    assert.equal(made.stdout, 'made\n', made.stderr);
    const r = await sh(s, `echo x > ${project}/x/y/pwned 2>/dev/null; echo end`, {
      sandbox: writeOnly(`${project}/x/y`),
    });
    untouched(target);
    assert.equal(r.stdout, 'end\n', r.stderr);
    // The same entry inside the project is honoured.
    const w = await sh(s, `echo x > ${project}/own && echo written`, { sandbox: writeOnly(project) });
    assert.equal(w.stdout, 'written\n', w.stderr);
    await s.close();
    untouched(target);
  });

  test('L18 a directory of root below one the sandbox user owns is not lent (it could be re-pointed)', async () => {
    const { project } = places('l18');
    const { s } = await openSandboxed(server, ALICE);
    await s.request('environmentConfig/read', { cwd: project });
    const made = await sh(s, `mkdir ${project}/x && id -u`);
    const uid = Number(made.stdout.trim());
    assert.equal(statSync(`${project}/x`).uid, uid, made.stderr);
    // Root's (an operator's, or a copy the server made): checked where it is, chowned by its
    // path, which the sandbox user could re-point between the two (`x -> /opt/app`).
    mkdirSync(`${project}/x/y`);
    chownSync(`${project}/x/y`, 0, 0);
    await s.request('environmentConfig/read', { cwd: `${project}/x/y` });
    const r = await sh(s, `echo x > ${project}/x/y/f 2>/dev/null; echo end`);
    assert.equal(r.stdout, 'end\n', r.stderr);
    assert.equal(statSync(`${project}/x/y`).uid, 0, 'lent through a path its user could re-point');
    await s.close();
  });

  test('L19 a command whose cwd is a directory of root under the host /tmp does not get it lent', async () => {
    const dir = `/tmp/exec-server-confined-${process.pid}`;
    mkdirSync(dir, { mode: 0o700 });
    writeFileSync(`${dir}/secret`, 'SECRET\n', { mode: 0o600 });
    try {
      const { s } = await openSandboxed(server, ALICE);
      const r = await sh(s, 'cat secret 2>/dev/null; echo x > pwned 2>/dev/null; echo end', { cwd: dir });
      assert.ok(!r.stdout.includes('SECRET'), 'a root-only file was read');
      assert.ok(!existsSync(`${dir}/pwned`), 'the tenant wrote outside its host directories');
      assert.equal(statSync(dir).uid, 0, 'root keeps its directory');
      assert.equal(statSync(`${dir}/secret`).uid, 0);
      await s.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('L20 fs/copy of a readable directory holding a file only root may read is refused', async () => {
    const pub = await mkdtemp('/var/tmp/exec-server-confined-pub-');
    chmodSync(pub, 0o755);
    mkdirSync(`${pub}/open`, { mode: 0o755 });
    writeFileSync(`${pub}/open/readme`, 'hello\n', { mode: 0o644 });
    writeFileSync(`${pub}/secret`, 'SECRET\n', { mode: 0o600 });
    try {
      const { s, workdir } = await openSandboxed(server, ALICE);
      const copy = (sourcePath: string, to: string) =>
        s.request('fs/copy', { sourcePath, destinationPath: `${workdir}/${to}`, recursive: true });
      await assert.rejects(copy(pub, 'copied'), refused('EXEC_ERR_FS_DENIED'));
      const r = await sh(s, 'cat copied/secret 2>/dev/null; echo end');
      assert.equal(r.stdout, 'end\n', 'a root-only file was copied out to the tenant');
      // What its user may read copies as before.
      await copy(`${pub}/open`, 'open');
      const ok = await sh(s, 'cat open/readme');
      assert.equal(ok.stdout, 'hello\n', ok.stderr);
      await s.close();
    } finally {
      rmSync(pub, { recursive: true, force: true });
    }
  });
});
