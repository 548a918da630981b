/**
 * What held in the security review stays held (issue 25, "What held"), on each backend:
 * - a command inherits fds 0-2 only, sandboxed or not, pipe or terminal, even from a server
 *   started with descriptors its parent leaked to it (two pipes as fds 3 and 4 here);
 * - a deny-read path stays unreadable to a command that asked to run outside the sandbox
 *   (`require-escalated`) and was approved: the approval is asked, the file is not read.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { dockerTestOptions, TEST_IMAGE } from '../docker/engine.ts';
import { BACKENDS } from '../support/backends.ts';
import { spawnServer } from './support.ts';

const { startServer, TestSession } = await import('../support/harness.ts');

for (const backend of BACKENDS) {
  const options = backend === 'docker' ? dockerTestOptions : { timeout: 120_000 };

  test(`held (${backend}): commands inherit only fds 0-2, whatever the server inherited`, options, async (t) => {
    // A docker server of its own instance: it must neither wait for nor adopt another server's containers.
    const docker = ['--image', TEST_IMAGE, '--instance-id', `held-${process.pid}-${Date.now()}`];
    const flags = ['--backend', backend, ...(backend === 'docker' ? docker : [])];
    const server = await spawnServer(flags, {}, 2);
    t.after(async () => {
      server.child.kill('SIGTERM');
      await server.exited;
    });
    for (const sandbox of [{ type: 'workspace-write' }, { type: 'danger-full-access' }]) {
      const s = await TestSession.open(server.url, { session: { sandbox } });
      t.after(() => s.close());
      for (const tty of [false, true]) {
        // The shell's own descriptors (not ls's: a last command would replace the shell).
        const r = await s.run(`fds-${tty}`, ['sh', '-c', 'ls /proc/$$/fd; exit 0'], { tty });
        const fds = (tty ? r.pty : r.stdout).split(/\s+/).filter((f) => f !== '');
        assert.deepEqual(fds, ['0', '1', '2'], `${sandbox.type} tty=${tty}: ${r.stdout}${r.pty}${r.stderr}`);
      }
    }
  });

  test(`held (${backend}): deny-read holds for an approved require-escalated command`, options, async (t) => {
    const server = await startServer({ backend });
    t.after(() => server.close());
    // What the file holds, read by a session that may read it.
    const open = await TestSession.open(server.url, { session: { sandbox: { type: 'danger-full-access' } } });
    t.after(() => open.close());
    const plain = await open.run('cat', ['cat', '/etc/group']);
    const firstLine = plain.stdout.split('\n')[0] ?? '';
    assert.match(firstLine, /^root:/);

    const asked: string[] = [];
    const s = await TestSession.open(
      server.url,
      { session: { denyRead: ['/etc/group'], approvalPolicy: 'on-request' } },
      {
        onServerRequest: (_method, params) => {
          asked.push(String(params['purpose']));
          return { decision: 'approved' };
        },
      },
    );
    t.after(() => s.close());
    const r = await s.run('esc', ['cat', '/etc/group'], { sandboxPermissions: 'require-escalated' });
    assert.deepEqual(asked, ['initial'], 'the escalation was asked and approved');
    assert.notEqual(r.exited['exitCode'], 0, r.stdout);
    assert.ok(!`${r.stdout}${r.stderr}`.includes(firstLine), 'the deny-read file was not read');
    assert.equal(
      r.events.some((e) => e.method === 'process/escalated'),
      false,
      'no attempt outside the sandbox',
    );
  });
}
