/**
 * Interactive shells in a PTY, sandboxed, on both backends (the local one with kept-warm
 * sandboxes and with one bwrap per command): each ends with the code its `exit` gave and prints
 * no process-group error (dash and busybox sh give the terminal back to the group they found at
 * start, which must exist in the sandbox's PID namespace), the sandbox user has a name, and
 * signals and kills still reach a PTY command that owns the terminal's foreground.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { BACKENDS } from '../support/backends.ts';
import { b64, startServer, TestSession, type BackendKind, type TestServer } from '../support/harness.ts';

const SANDBOX = { sandbox: { type: 'workspace-write' } };
const SHELLS: readonly { readonly name: string; readonly argv: string[]; readonly code: number }[] = [
  { name: 'sh (dash locally, busybox in the test image)', argv: ['sh'], code: 5 },
  { name: 'bash', argv: ['bash'], code: 4 },
  { name: 'busybox sh', argv: ['busybox', 'sh'], code: 3 },
];

const VARIANTS = BACKENDS.flatMap((backend): { backend: BackendKind; cold: boolean; label: string }[] =>
  backend === 'local'
    ? [
        { backend, cold: false, label: 'local, warm sandbox' },
        { backend, cold: true, label: 'local, one bwrap per command' },
      ]
    : [{ backend, cold: false, label: backend }],
);

for (const { backend, cold, label } of VARIANTS) {
  describe(`interactive shells in a PTY [${label}]`, { timeout: 120_000 }, () => {
    let server: TestServer;
    let s: TestSession;

    test('setup', async () => {
      server = await startServer({ backend, coldSandbox: cold });
      s = await TestSession.open(server.url);
    });

    for (const shell of SHELLS) {
      test(`${shell.name}: \`exit ${shell.code}\` typed at the prompt ends it with ${shell.code}`, async () => {
        const id = `shell-${shell.argv.join('-')}`;
        await s.start(id, shell.argv, { tty: true, ...SANDBOX });
        await s.request('process/write', { processId: id, chunk: b64(`id -un; exit ${shell.code}\n`) });
        const r = await s.result(id);
        assert.equal(r.exited['exitCode'], shell.code, r.pty);
        assert.equal(r.exited['terminal'], 'exited');
        assert.doesNotMatch(r.pty, /process group|no job control|I have no name/i);
        assert.match(r.pty, /(?:^|[\n\r ])sandbox\r\n/);
      });
    }

    test('`id -un` names the sandbox user, in pipe mode too', async () => {
      const r = await s.run('id', ['sh', '-c', 'id -un; id -gn'], SANDBOX);
      assert.equal(r.stdout, 'sandbox\nsandbox\n', r.stderr);
      assert.equal(r.exited['exitCode'], 0);
    });

    // One bwrap per command: bwrap itself is in the group signalled and ends on the first signal
    // (so did it before the command took the terminal's foreground); kept-warm sandboxes only.
    const signalOpts = { skip: cold ? 'bwrap per command: the signal ends bwrap itself' : false };

    test('process/signal reaches a PTY command: SIGINT handled, SIGTERM ends it as signaled', signalOpts, async () => {
      const script = 'trap "echo got-int" INT; echo armed; while :; do sleep 0.1; done';
      await s.start('trap', ['sh', '-c', script], { tty: true, ...SANDBOX });
      await s.waitFor(() => s.eventsOf('trap').some((e) => e.method === 'process/output'));
      await s.request('process/signal', { processId: 'trap', signal: 'SIGINT' });
      const text = (): string =>
        s
          .eventsOf('trap')
          .filter((e) => e.method === 'process/output')
          .map((e) => Buffer.from(e.params['chunk'] as string, 'base64').toString())
          .join('');
      await s.waitFor(() => text().includes('got-int'), 10_000, 'the trap of SIGINT');
      await s.request('process/signal', { processId: 'trap', signal: 'SIGTERM' });
      const r = await s.result('trap');
      assert.equal(r.exited['terminal'], 'signaled');
      assert.equal(r.exited['exitCode'], 143);
    });

    test('terminate ends a PTY command that ignores SIGTERM (SIGKILL after the grace)', signalOpts, async () => {
      await s.start('stubborn', ['sh', '-c', 'trap "" TERM; echo armed; while :; do sleep 1; done'], {
        tty: true,
        ...SANDBOX,
      });
      await s.waitFor(() => s.eventsOf('stubborn').some((e) => e.method === 'process/output'));
      await s.request('process/terminate', { processId: 'stubborn' });
      const r = await s.result('stubborn', 10_000);
      assert.equal(r.exited['terminal'], 'terminated');
      assert.equal(r.exited['exitCode'], 137);
      const ps = await s.run('ps', ['sh', '-c', 'ps -eo args 2>/dev/null || ps'], SANDBOX);
      assert.doesNotMatch(ps.stdout, /trap "" TERM/);
    });

    test('teardown', async () => {
      await s.close();
      await server.close();
    });
  });
}
