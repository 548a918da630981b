/** The container-user sandbox: writes only in writable roots, deny-read enforced, root unaffected. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ResolvedSandbox } from '../../src/backends/types.ts';
import { dockerTestOptions } from './engine.ts';
import { RecordingSink, sharedSession, spawnRequest, UNRESTRICTED } from './helpers.ts';

const shared = sharedSession();

const RESTRICTED: ResolvedSandbox = {
  kind: 'restricted',
  writableRoots: ['/workspace', '/tmp'],
  denyRead: ['/workspace/secret', '/etc/shadow-like'],
  network: false,
};

async function run(
  script: string,
  sandbox: ResolvedSandbox,
): Promise<{ code: number; out: string; sandboxType: string }> {
  const sink = new RecordingSink();
  const proc = await shared.session.spawn(spawnRequest(['sh', '-c', script], { sandbox }), sink);
  const exit = await sink.exited;
  return { code: exit.kind === 'exited' ? exit.code : -1, out: sink.text(), sandboxType: proc.sandboxType };
}

test('restricted attempt runs as the sandbox user and can write its roots', dockerTestOptions, async () => {
  await run(
    'mkdir -p /workspace/secret && echo top > /workspace/secret/key && echo x > /etc/shadow-like && echo root-file > /workspace/by-root',
    UNRESTRICTED,
  );
  const r = await run(
    'id -u; echo hi > /workspace/new.txt && echo hi > /tmp/t.txt && echo more >> /workspace/by-root && echo ok',
    RESTRICTED,
  );
  assert.equal(r.sandboxType, 'container-user');
  assert.equal(r.out, '1000\nok\n');
});

test('restricted attempt is denied writes elsewhere and deny-read paths', dockerTestOptions, async () => {
  const w = await run('echo x > /etc/evil', RESTRICTED);
  assert.notEqual(w.code, 0);
  assert.match(w.out, /Permission denied/);
  const r1 = await run('cat /workspace/secret/key', RESTRICTED);
  assert.notEqual(r1.code, 0);
  assert.match(r1.out, /Permission denied/);
  const r2 = await run('cat /etc/shadow-like', RESTRICTED);
  assert.match(r2.out, /Permission denied/);
  const r3 = await run('ls /workspace/secret', RESTRICTED);
  assert.match(r3.out, /Permission denied/);
});

test('unrestricted attempt (root) can do all of it', dockerTestOptions, async () => {
  const r = await run(
    'id -u; echo x > /etc/evil && cat /workspace/secret/key /etc/shadow-like && echo w >> /workspace/new.txt && echo ok',
    UNRESTRICTED,
  );
  assert.equal(r.sandboxType, 'none');
  assert.equal(r.out, '0\ntop\nx\nok\n');
});

test(
  'read-only sandbox: nothing writable, /tmp closed too; files root made later get re-owned',
  dockerTestOptions,
  async () => {
    const ro: ResolvedSandbox = { kind: 'restricted', writableRoots: [], denyRead: [], network: false };
    const r = await run('echo x > /tmp/ro.txt', ro);
    assert.match(r.out, /Permission denied/);
    const r2 = await run('echo x > /workspace/ro.txt', ro);
    assert.match(r2.out, /Permission denied/);
    // Back to workspace-write: /tmp open again; a file root created meanwhile is writable.
    await run('echo r > /workspace/later-by-root', UNRESTRICTED);
    const r3 = await run('echo y > /tmp/rw.txt && echo y >> /workspace/later-by-root && echo ok', RESTRICTED);
    assert.equal(r3.out, 'ok\n');
  },
);

test('signals reach a sandbox-user process group', dockerTestOptions, async () => {
  const sink = new RecordingSink();
  const proc = await shared.session.spawn(
    spawnRequest(['sh', '-c', 'sleep 500 & echo started; wait'], { sandbox: RESTRICTED }),
    sink,
  );
  while (!sink.text().includes('started')) await new Promise((r) => setTimeout(r, 10));
  await proc.signal('SIGKILL');
  assert.deepEqual(await sink.exited, { kind: 'signaled', signal: 'SIGKILL', signo: 9 });
  const ps = await run('ps -o args', UNRESTRICTED);
  assert.ok(!ps.out.split('\n').includes('sleep 500'), ps.out);
});
