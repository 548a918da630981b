/**
 * Sandboxed commands of the local backend, pipe and PTY mode, start from the session's relay
 * spawner (relay-spawner.ts): still confined, and each denial still classified inside the early-exit
 * window while the server's event loop is busy (a command then often ends before the server has
 * read the spawner's reply and the relay's sockets).
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { startServer, TestSession } from '../support/harness.ts';

/** The parent's name of the relay (build/pty-relay) whose command line holds `marker`. */
async function relayParent(marker: string): Promise<string | undefined> {
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (!cmdline.includes('pty-relay') || !cmdline.includes(marker)) continue;
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    const ppid = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1];
    return (await readFile(`/proc/${ppid}/comm`, 'utf8').catch(() => '')).trim();
  }
  return undefined;
}

/** Keeps the event loop busy 30 ms of every 32, as a loaded server's would be. */
function busyLoop(): () => void {
  const timer = setInterval(() => {
    const end = performance.now() + 30;
    while (performance.now() < end);
  }, 2);
  return () => clearInterval(timer);
}

test('a sandboxed command starts from the spawner and stays confined', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const s = await TestSession.open(server.url, { session: { approvalPolicy: 'never' } });
  t.after(() => s.close());
  const info = await s.request<Record<string, unknown>>('session/info', {});
  assert.equal(info['sandboxType'], 'bubblewrap', 'bubblewrap runs on this machine');
  for (const tty of [false, true]) {
    const marker = `spawner-probe-${process.pid}-${tty}`;
    const start = await s.start(`long-${tty}`, ['sh', '-c', `sleep 30 # ${marker}`], { tty });
    assert.equal(start['sandboxType'], 'linuxSeccomp');
    assert.equal(await relayParent(marker), 'relay-spawner', `tty ${tty}`);
    await s.request('process/terminate', { processId: `long-${tty}` });
    await s.result(`long-${tty}`);
  }

  const outside = `/var/tmp/spawner-probe-${process.pid}`;
  const w = await s.run('write', ['sh', '-c', `echo x > ${outside}`]);
  assert.notEqual(w.exited['exitCode'], 0);
  assert.equal(w.exited['sandboxDenied'], true);
  assert.match(w.stderr, /read-only file system/i);
  const pty = await s.run('write-pty', ['sh', '-c', `echo x > ${outside}`], { tty: true });
  assert.equal(pty.exited['sandboxDenied'], true);
  assert.match(pty.pty, /read-only file system/i);
  assert.equal(existsSync(outside), false, 'nothing was written outside the workspace');
  const inside = await s.run('inside', ['sh', '-c', 'echo y > here && cat here']);
  assert.equal(inside.stdout, 'y\n');
});

test('every denial of the same command is handled, with the server busy', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const asked: unknown[] = [];
  const s = await TestSession.open(
    server.url,
    { session: { approvalPolicy: 'on-failure' } },
    {
      onServerRequest: (_method, params) => {
        asked.push(params);
        return { decision: 'approved-for-session' };
      },
    },
  );
  t.after(() => s.close());
  const probe = `/var/tmp/spawner-denial-${process.pid}`;
  const argv = ['sh', '-c', `echo x > ${probe} && rm -f ${probe}`];
  const stop = busyLoop();
  t.after(stop);
  for (let i = 0; i < 8; i++) {
    const r = await s.run(`d${i}`, argv);
    assert.equal(r.exited['exitCode'], 0, `denial ${i} was retried without the sandbox`);
    assert.ok(
      r.events.some((e) => e.method === 'process/escalated'),
      `denial ${i} was classified`,
    );
  }
  assert.equal(asked.length, 1, 'asked once, then approved for the session');
});
