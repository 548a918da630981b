/**
 * Cross-tenant agent hijack (docs/security-agent-link.md): a tenant that is root in its own
 * container (`danger-full-access`) tries to point the server's connection to its exec agent at
 * another session's agent, by that session's host directory and through `/proc/<pid>/root`,
 * kills its own agent and runs commands. Nothing may run in the other container, the other
 * session's running command must end normally with all its output, and the attacker's session
 * gets its own agent back. Against a real server and engine.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { startServer, TestSession, type TestServer } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';
import { docker } from './helpers.ts';

const LINK = '/run/exec-server/r/link';
const ROOT = { sandbox: { type: 'danger-full-access' } };

interface Target {
  readonly containerId: string;
  /** The server's directory of the container (its link socket is in `s/`, mounted read-only). */
  readonly linkDir: string;
  readonly hostPid: number;
  readonly hostname: string;
}

async function targetOf(s: TestSession): Promise<Target> {
  const info = await s.request<{ containerId: string; agentTransport?: string }>('session/info', {});
  assert.equal(info.agentTransport, 'socket', 'the session reaches its agent over its link');
  const [inspect] = JSON.parse(await docker('inspect', info.containerId)) as Array<{
    State: { Pid: number };
    Config: { Hostname: string };
    Mounts: Array<{ Source: string; Destination: string; RW: boolean }>;
  }>;
  const mount = inspect?.Mounts.find((m) => m.Destination === LINK);
  assert.ok(inspect && mount, 'the link directory is mounted');
  assert.equal(mount.RW, false, 'read-only');
  return {
    containerId: info.containerId,
    linkDir: dirname(mount.Source),
    hostPid: inspect.State.Pid,
    hostname: inspect.Config.Hostname,
  };
}

/** Connects to a link socket from the host, sends `greeting`, resolves with what happened. */
function knock(path: string, greeting: Buffer): Promise<{ closed: boolean; data: number }> {
  return new Promise((resolve) => {
    const s = connect(path);
    let data = 0;
    const timer = setTimeout(() => {
      s.destroy();
      resolve({ closed: false, data });
    }, 10_000);
    s.on('connect', () => s.write(greeting));
    s.on('data', (d) => (data += d.length));
    s.on('error', () => undefined);
    s.on('close', () => {
      clearTimeout(timer);
      resolve({ closed: true, data });
    });
  });
}

test('root in one container cannot hijack another session through its agent link', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 240_000,
}, async (t) => {
  const root = await mkdtemp(join(tmpdir(), 'exec-server-hijack-'));
  t.after(() => rm(root, { recursive: true, force: true }));
  const server: TestServer = await startServer({ backend: 'docker', flags: ['--docker-agent-socket-dir', root] });
  t.after(() => server.close());
  const victim = await TestSession.open(server.url, { session: ROOT });
  const attacker = await TestSession.open(server.url, { session: ROOT });
  t.after(() => Promise.all([victim.close(), attacker.close()]));
  const b = await targetOf(victim);
  const a = await targetOf(attacker);
  assert.notEqual(a.hostname, b.hostname);

  await victim.run('mark', ['sh', '-c', 'echo victim-data >/victim-marker']);
  // The victim's long command: every line must arrive, and it must end with its own code.
  await victim.start('long', [
    'sh',
    '-c',
    'i=0; while [ $i -lt 80 ]; do echo b-$i; i=$((i+1)); sleep 0.1; done; exit 7',
  ]);

  // 1. Replace the agent socket with a symlink to the victim's, both ways; remount; unmount.
  const targets = [`${b.linkDir}/s/agent.sock`, `/proc/${b.hostPid}/root${LINK}/agent.sock`];
  const attack = await attacker.run('attack', [
    'sh',
    '-c',
    [
      'L=$1; shift',
      'for t in "$@"; do',
      '  ln -sfn "$t" "$L/agent.sock" 2>&1 && echo REPLACED || echo refused',
      '  rm -f "$L/agent.sock" 2>&1 && echo REMOVED || echo kept',
      '  [ -e "$t" ] && echo REACHABLE || echo unreachable',
      'done',
      'mount -o remount,rw "$L" 2>&1 && echo REMOUNTED || echo no-remount',
      'umount -l "$L" 2>&1 && echo UNMOUNTED || echo no-umount',
      'mkdir -p /tmp/fake && ln -s "$1" /tmp/fake/agent.sock && mount --bind /tmp/fake "$L" 2>&1 && echo MOUNTED || echo no-mount',
    ].join('\n'),
    'sh',
    LINK,
    ...targets,
  ]);
  const said = attack.stdout.split('\n').filter((l) => /^[a-zA-Z-]+$/.test(l));
  assert.deepEqual(
    said,
    ['refused', 'kept', 'unreachable', 'refused', 'kept', 'unreachable', 'no-remount', 'no-umount', 'no-mount'],
    attack.stdout,
  );
  assert.match(attack.stdout, /Read-only file system/);

  // 2. Kill its own agent (the command that does it goes with it), then run commands.
  await attacker.start('kill', [
    'sh',
    '-c',
    'for d in /proc/[0-9]*; do case "$(tr "\\0" " " <$d/cmdline 2>/dev/null)" in *exec-agent\\ start*) kill -9 "${d#/proc/}";; esac; done; sleep 5',
  ]);
  const killed = await attacker.result('kill');
  assert.equal(killed.exited['terminal'], 'lost', 'the command went with its agent');
  for (let i = 0; i < 5; i++) {
    const r = await attacker.run(`after-${i}`, [
      'sh',
      '-c',
      'touch /tmp/attacker-was-here; hostname; cat /victim-marker 2>/dev/null || echo no-marker',
    ]);
    assert.equal(r.stdout, `${a.hostname}\nno-marker\n`, 'the attacker runs in its own container');
  }
  const info = await attacker.request<{ agentTransport?: string; status: string }>('session/info', {});
  assert.equal(info.agentTransport, 'socket', 'the attacker got its own agent back, on its own link');

  // 3. The same secret-less or wrong-secret knock on the victim's link from the host (as if the
  // attacker could reach it): refused, the victim unaffected.
  const victimSocket = join(b.linkDir, 's', 'agent.sock');
  const attackerSecret = Buffer.from((await readFile(join(a.linkDir, 'secret'), 'utf8')).trim(), 'hex');
  for (const greeting of [
    Buffer.concat([Buffer.from('EXAGLNK1'), attackerSecret]),
    Buffer.concat([Buffer.from('EXAGLNK1'), Buffer.alloc(32)]),
    Buffer.from('d'),
  ]) {
    const knocked = await knock(victimSocket, greeting);
    assert.deepEqual(knocked, { closed: true, data: 0 }, `refused without a word: ${greeting.length} bytes`);
  }

  // 4. The victim: its command ended normally with every line; nothing of the attacker in it.
  const long = await victim.result('long', 60_000);
  assert.equal(long.stdout, Array.from({ length: 80 }, (_, i) => `b-${i}\n`).join(''));
  assert.equal(long.exited['exitCode'], 7);
  const check = await victim.run('check', [
    'sh',
    '-c',
    'hostname; cat /victim-marker; [ -e /tmp/attacker-was-here ] && echo INTRUDED || echo clean',
  ]);
  assert.equal(check.stdout, `${b.hostname}\nvictim-data\nclean\n`);
  const victimInfo = await victim.request<{ agentTransport?: string }>('session/info', {});
  assert.equal(victimInfo.agentTransport, 'socket');
});
