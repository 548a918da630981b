/**
 * Kept-warm sandboxes (local backend, src/backends/local/warm-sandbox.ts): a command that joins
 * a warm sandbox is confined exactly like one started in its own bwrap, a sandbox is reused
 * only for identical arguments, and a session's sandboxes end with it.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { readlinkSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { silentLogger } from '../../src/logger.ts';
import { probeWarmSandbox, WarmSandboxes } from '../../src/backends/local/warm-sandbox.ts';
import { SANDBOX_BASE } from '../../src/backends/local/bubblewrap.ts';
import { serverFor, sessionFor, TestSession } from '../support/harness.ts';

/**
 * bwrap holder processes (`... -- sandbox-join --hold`) whose arguments mention `path`: the
 * outer bwrap of each (its child, the init of the sandbox's PID namespace, has the same arguments).
 */
function holdersFor(path: string): number {
  const rows = execFileSync('ps', ['-eo', 'pid=,ppid=,args='], { encoding: 'utf8' })
    .split('\n')
    .map((l) => /^\s*(\d+)\s+(\d+)\s+(.*)$/.exec(l))
    .filter(
      (m): m is RegExpExecArray =>
        m !== null && m[3]!.startsWith('bwrap ') && m[3]!.includes(path) && m[3]!.endsWith(' --hold'),
    );
  const pids = new Set(rows.map((m) => m[1]));
  return rows.filter((m) => !pids.has(m[2])).length;
}

/** Warm sandboxes need root: elsewhere these tests say so and skip; under CI=true they must run. */
const warmOnly =
  process.getuid?.() === 0 || process.env['CI'] === 'true'
    ? {}
    : { skip: 'kept-warm sandboxes need root (the server falls back to one bwrap per command)' };

const CONFINEMENT = [
  'echo data > inside && cat inside',
  'touch /etc/exec-server-escape 2>/dev/null && echo ESCAPED-ROOT || echo root-read-only',
  'grep CapEff /proc/self/status',
  'readlink /proc/self/ns/net',
  'cat "$DENIED" 2>/dev/null || echo denied-unreadable',
].join('; ');

for (const mode of ['warm', 'cold'] as const) {
  describe(`sandbox confinement [${mode}]`, { timeout: 120_000 }, () => {
    test('workspace writable, root read-only, no capabilities, own network, deny-read honoured', async (t) => {
      const server = await serverFor(t, { coldSandbox: mode === 'cold' });
      const s0 = await TestSession.open(server.url, { session: { sandbox: { type: 'workspace-write' } } });
      const workdir = String((await s0.request<Record<string, unknown>>('session/info', {}))['workdir']);
      await s0.close();
      const denied = `${workdir}-secret`;
      execFileSync('sh', ['-c', `echo top-secret > '${denied}'`]);
      t.after(() => execFileSync('rm', ['-f', denied]));
      const s = await TestSession.open(server.url, {
        session: { sandbox: { type: 'workspace-write' }, denyRead: [denied] },
      });
      t.after(() => s.close());
      for (let i = 0; i < 3; i++) {
        const r = await s.run(`c${i}`, ['sh', '-c', CONFINEMENT], { env: { DENIED: denied } });
        const lines = r.stdout.trim().split('\n');
        assert.equal(lines[0], 'data');
        assert.equal(lines[1], 'root-read-only');
        assert.equal(lines[2], 'CapEff:\t0000000000000000');
        assert.notEqual(lines[3], readlinkSync('/proc/self/ns/net'), 'a network namespace of its own');
        assert.equal(lines[4], 'denied-unreadable');
        assert.equal(r.exited['exitCode'], 0);
      }
    });
  });
}

test(
  'one warm sandbox per argument set: reused, replaced when a deny-read path appears or is recreated, ended with the session',
  warmOnly,
  async (t) => {
    const server = await serverFor(t);
    const workdir = await mkdtemp(join(tmpdir(), 'exec-server-warm-'));
    t.after(() => rm(workdir, { recursive: true, force: true }));
    const s = await TestSession.open(server.url, {
      session: { workdir, sandbox: { type: 'workspace-write' }, denyRead: [`${workdir}/.env`] },
    });
    t.after(() => s.close());
    for (let i = 0; i < 5; i++) assert.equal((await s.run(`a${i}`, ['true'])).exited['exitCode'], 0);
    assert.equal(holdersFor(workdir), 1, 'five commands, one warm sandbox');

    // The deny-read path does not exist yet; once it does, no command may see it through the old sandbox.
    const make = await s.run('make-env', ['sh', '-c', 'echo API_KEY=1 > .env && echo made']);
    assert.equal(make.stdout, 'made\n');
    const read = await s.run('read-env', ['sh', '-c', 'cat .env 2>/dev/null || echo unreadable']);
    assert.equal(read.stdout, 'unreadable\n');
    assert.equal(holdersFor(workdir), 2);
    // Deleted and written again, the file is a new one; the placeholder over the old one would not cover it.
    await rm(join(workdir, '.env'));
    execFileSync('sh', ['-c', `echo API_KEY=2 > '${workdir}/.env'`]);
    const again = await s.run('read-env-again', ['sh', '-c', 'cat .env 2>/dev/null || echo unreadable']);
    assert.equal(again.stdout, 'unreadable\n');

    const res = await server.app.inject({ method: 'DELETE', url: `/v1/sessions/${s.sessionId}` });
    assert.equal(res.statusCode, 204);
    const deadline = Date.now() + 5_000;
    while (holdersFor(workdir) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.equal(holdersFor(workdir), 0, 'the session took its warm sandboxes with it');
  },
);

test('the native helper confines relative paths too, and a missing cwd fails clearly', warmOnly, async (t) => {
  const tools = await probeWarmSandbox('bwrap', silentLogger);
  assert.ok(tools, 'warm sandboxes are available here (root, bwrap, build/sandbox-join built by npm install)');
  const dir = await mkdtemp(join(tmpdir(), 'exec-server-join-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  execFileSync('sh', ['-c', `echo secret > '${dir}/.env'`]);
  const placeholder = join(dir, 'placeholder');
  execFileSync('sh', ['-c', `: > '${placeholder}'; chmod 000 '${placeholder}'`]);
  const args = [
    ...SANDBOX_BASE,
    '--cap-drop',
    'ALL',
    '--die-with-parent',
    '--unshare-net',
    '--bind',
    dir,
    dir,
    '--ro-bind',
    placeholder,
    `${dir}/.env`,
    '--chdir',
    dir,
  ];
  const sandboxes = new WarmSandboxes(tools, silentLogger);
  t.after(() => sandboxes.close());
  const argv = await sandboxes.wrap(args, dir, [
    'sh',
    '-c',
    'pwd; cat .env 2>/dev/null || echo unreadable; echo ok > made && cat made; touch /etc/escape 2>/dev/null && echo ESCAPED || echo read-only; grep CapBnd /proc/self/status',
  ]);
  assert.equal(argv[0], tools.join);
  // Started from elsewhere on purpose: the directory is entered inside the sandbox.
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', cwd: '/' });
  assert.equal(r.stdout, `${dir}\nunreadable\nok\nread-only\nCapBnd:\t0000000000000000\n`, r.stderr);
  assert.equal(r.status, 0);
  // A pid whose namespaces are not the holder's (the holder gone, its pid reused) is refused.
  const wrongNs = [...argv];
  wrongNs[2] = String(Number(argv[2]) + 1);
  const refused = spawnSync(wrongNs[0]!, wrongNs.slice(1), { encoding: 'utf8' });
  assert.equal(refused.status, 125);
  assert.match(refused.stderr, /the mount namespace is not the sandbox's/);
  const missing = await sandboxes.wrap(args, `${dir}/nope`, ['true']);
  const m = spawnSync(missing[0]!, missing.slice(1), { encoding: 'utf8' });
  assert.equal(m.status, 125);
  assert.match(m.stderr, /cannot change directory to .*nope: No such file or directory/);
});

test('a writable root removed and created again is the new directory for the next command', warmOnly, async (t) => {
  const server = await serverFor(t);
  // Outside /tmp: a root under a writable parent would be reached through the parent's bind anyway.
  const extra = await mkdtemp('/var/tmp/exec-server-extra-');
  t.after(() => rm(extra, { recursive: true, force: true }));
  const s = await TestSession.open(server.url, {
    session: { sandbox: { type: 'workspace-write', writableRoots: [extra] } },
  });
  t.after(() => s.close());
  assert.equal((await s.run('w1', ['sh', '-c', `echo one > '${extra}/first' && echo ok`])).stdout, 'ok\n');
  await rm(extra, { recursive: true, force: true });
  execFileSync('mkdir', [extra]);
  assert.equal((await s.run('w2', ['sh', '-c', `echo two > '${extra}/second' && echo ok`])).stdout, 'ok\n');
  assert.equal(execFileSync('cat', [join(extra, 'second')], { encoding: 'utf8' }), 'two\n');
});

test(
  'a sandboxed command cannot reach into a warm holder (non-dumpable: no ptrace, no /proc root)',
  warmOnly,
  async (t) => {
    const server = await serverFor(t);
    const s = await sessionFor(t, server.url, { session: { sandbox: { type: 'workspace-write' } } });
    const workdir = String((await s.request<Record<string, unknown>>('session/info', {}))['workdir']);
    assert.equal((await s.run('warm', ['true'])).exited['exitCode'], 0);
    const ps = execFileSync('ps', ['-eo', 'pid,args'], { encoding: 'utf8' }).split('\n');
    const bwrapPid = ps
      .find((l) => l.includes(workdir) && l.trim().split(/\s+/)[1] === 'bwrap' && l.endsWith(' --hold'))
      ?.trim()
      .split(/\s+/)[0];
    assert.ok(bwrapPid, 'the holder bwrap runs');
    const holderPid = execFileSync('pgrep', ['-P', bwrapPid], { encoding: 'utf8' }).trim();
    const probe = `ls /proc/${holderPid}/root/ >/dev/null 2>&1 && echo root-open || echo root-closed; cat /proc/${holderPid}/environ >/dev/null 2>&1 && echo environ-open || echo environ-closed`;
    const r = await s.run('probe', ['sh', '-c', probe]);
    assert.equal(r.stdout, 'root-closed\nenviron-closed\n');
  },
);
