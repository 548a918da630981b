/**
 * Isolation between local sessions, tried as a hostile sandboxed command would (docs/reliability.md,
 * cases L1-L6): against the real server process with two tenants, on warm and cold sandboxes.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { RpcError } from '../../src/client/rpc-connection.ts';
import type { TestSession, ProcessResult } from '../support/harness.ts';
import { openSandboxed, rootSandboxOnly, spawnServer, type ServerProcess } from './support.ts';

const TA = 'tenant-a-secret-token';
const TB = 'tenant-b-secret-token';

let n = 0;
const sh = (s: TestSession, script: string, extra: Record<string, unknown> = {}): Promise<ProcessResult> =>
  s.run(`p${n++}`, ['sh', '-c', script], extra);

describe('local sessions are isolated from each other and from the server', {
  ...rootSandboxOnly,
  timeout: 180_000,
}, () => {
  let server: ServerProcess;
  before(async () => {
    server = await spawnServer(['--tokens', `alice:${TA},bob:${TB}`]);
  });
  after(async () => {
    server.child.kill('SIGTERM');
    await server.exited;
  });

  test('L1 tokens: no sandboxed command can read them, and the server shows none in its command line', async () => {
    assert.ok(!readFileSync(`/proc/${server.pid}/cmdline`, 'utf8').includes(TA), 'the server rewrote its command line');
    const { s } = await openSandboxed(server, TA, { sandbox: { type: 'workspace-write', networkAccess: true } });
    const r = await sh(
      s,
      'cat /proc/*/cmdline /proc/*/environ 2>/dev/null | tr "\\0" " "; echo; ps -eo pid,args | wc -l',
    );
    assert.ok(!r.stdout.includes(TA) && !r.stdout.includes(TB), 'a token was readable from inside the sandbox');
    // bwrap's init, the holder, the shell, ps and wc (and the header line): the session's own processes only.
    assert.ok(Number(r.stdout.trim().split('\n').pop()) <= 8, `the sandbox sees other processes: ${r.stdout}`);
    await s.close();
  });

  test('L2 cross-session writes: neither the other workspace nor the other /tmp is reachable', async () => {
    const a = await openSandboxed(server, TA);
    const b = await openSandboxed(server, TB);
    const wa = await sh(
      a.s,
      `echo from-a > /tmp/a-marker; echo x > '${b.workdir}/pwned' 2>/dev/null && echo WROTE; ls '${b.workdir}' >/dev/null 2>&1 && echo LISTED; echo done`,
    );
    assert.equal(wa.stdout, 'done\n');
    const rb = await sh(b.s, 'cat /tmp/a-marker 2>/dev/null || echo no-marker; ls -A /tmp');
    assert.equal(rb.stdout.split('\n')[0], 'no-marker', "one session's /tmp is not another's");
    const ra = await sh(a.s, 'cat /tmp/a-marker');
    assert.equal(ra.stdout, 'from-a\n', 'a session keeps its /tmp across commands');
    await a.s.close();
    await b.s.close();
  });

  test('L3 users: each session its own unprivileged uid; root-only files closed to commands and to fs/readFile', async () => {
    const a = await openSandboxed(server, TA);
    const b = await openSandboxed(server, TB);
    const ua = Number((await sh(a.s, 'id -u')).stdout);
    const ub = Number((await sh(b.s, 'id -u')).stdout);
    assert.ok(ua > 0 && ub > 0 && ua !== ub, `uids ${ua} and ${ub}`);
    assert.equal((await sh(a.s, 'cat /etc/shadow >/dev/null 2>&1 && echo READ || echo closed')).stdout, 'closed\n');
    await assert.rejects(
      a.s.request('fs/readFile', { path: '/etc/shadow' }),
      (err: unknown) => err instanceof RpcError && err.code === 'EXEC_ERR_FS_DENIED',
    );
    await a.s.close();
    await b.s.close();
  });

  test("L4 deny-read through another session's /proc/<pid>/root: nothing to open", async () => {
    const b0 = await openSandboxed(server, TB);
    const secret = `${b0.workdir}-secret`;
    writeFileSync(secret, 'top-secret\n');
    await b0.s.close();
    const { s: b } = await openSandboxed(server, TB, { denyRead: [secret] });
    // B's sandbox has the placeholder over the secret; A looks for any process whose root shows it.
    await b.start('holder', ['sleep', '30']);
    const { s: a } = await openSandboxed(server, TA);
    const r = await sh(
      a,
      `for p in /proc/[0-9]*; do cat "$p/root${secret}" 2>/dev/null; done; ls /proc | grep -c '^[0-9]'`,
    );
    assert.ok(!r.stdout.includes('top-secret'), r.stdout);
    assert.ok(Number(r.stdout.trim()) <= 6, `A sees other processes: ${r.stdout}`);
    await b.request('process/terminate', { processId: 'holder' });
    await a.close();
    await b.close();
    rmSync(secret, { force: true });
  });

  test('L5 deny-read placeholders cannot be changed or removed from inside a sandbox', async () => {
    const workdir = await mkdtemp('/var/tmp/exec-server-rel-');
    const denied = `${workdir}/.env`;
    writeFileSync(denied, 'API_KEY=1\n');
    const { s } = await openSandboxed(server, TB, { workdir, denyRead: [denied] });
    // The placeholder's own path, from the mount table.
    const where = await sh(s, `grep ' ${denied} ' /proc/self/mountinfo | head -1`);
    assert.match(where.stdout, /\.env/);
    // The placeholders of the servers on this host, named explicitly (a sandbox cannot list
    // them): the newest 20, this server's among them (a host where many servers were killed
    // keeps theirs, and all of them would not fit on one command line).
    const placeholders = readdirSync('/run/exec-server')
      .filter((d) => d.startsWith('deny-'))
      .map((d) => ({ d, at: statSync(`/run/exec-server/${d}`).mtimeMs }))
      .sort((a, b) => b.at - a.at)
      .slice(0, 20)
      .flatMap(({ d }) => [`/run/exec-server/${d}/file`, `/run/exec-server/${d}/dir`]);
    assert.ok(
      placeholders.some((p) => where.stdout.includes(` ${p} `)),
      `this server's placeholder is among those attacked: ${where.stdout}`,
    );
    assert.ok(placeholders.length >= 2);
    const attack = await sh(
      s,
      [
        'cat .env 2>/dev/null && echo READ-BEFORE',
        `for f in ${placeholders.join(' ')}; do chmod 777 "$f" 2>/dev/null && echo CHMOD; echo pwned > "$f" 2>/dev/null && echo WROTE; rm -r "$f" 2>/dev/null && echo REMOVED; done`,
        'chmod 644 .env 2>/dev/null && echo CHMOD-TARGET; echo x > .env 2>/dev/null && echo WROTE-TARGET',
        'cat .env 2>/dev/null && echo READ-AFTER',
        'echo end',
      ].join('; '),
    );
    assert.equal(attack.stdout, 'end\n');
    for (const p of placeholders) assert.equal(statSync(p).mode & 0o7777, 0, `${p} unchanged`);
    // Every later sandboxed start with a deny list still works, in this session and a new one.
    assert.equal((await sh(s, 'cat .env 2>/dev/null || echo still-denied')).stdout, 'still-denied\n');
    const { s: fresh } = await openSandboxed(server, TA, { denyRead: ['/etc/hostname'] });
    assert.equal((await sh(fresh, 'cat /etc/hostname 2>/dev/null || echo denied')).stdout, 'denied\n');
    await fresh.close();
    await s.close();
    rmSync(workdir, { recursive: true, force: true });
  });
});

describe('a loopback server without a token', { ...rootSandboxOnly, timeout: 120_000 }, () => {
  test('L6 gives sandboxed commands no network (they could otherwise drive the server itself)', async () => {
    const server = await spawnServer();
    try {
      const { s } = await openSandboxed(server, undefined, {
        sandbox: { type: 'workspace-write', networkAccess: true },
      });
      const r = await s.run('net', [
        'bash',
        '-c',
        `(echo > /dev/tcp/127.0.0.1/${server.port}) 2>/dev/null && echo reached || echo unreachable`,
      ]);
      assert.equal(r.stdout, 'unreachable\n');
      await s.close();
    } finally {
      server.child.kill('SIGTERM');
      await server.exited;
    }
  });
});
