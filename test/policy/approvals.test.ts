/** Approval flows over a real WebSocket: every way a client can answer (or not). */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { RpcError } from '../../src/client/rpc-connection.ts';
import { BACKENDS } from '../support/backends.ts';
import { sleep, startServer, TestSession, type BackendKind, type TestServer } from '../support/harness.ts';

const OUTSIDE: Record<BackendKind, string> = { local: '/var/tmp', docker: '/' };
const denied = (backend: BackendKind, tag: string): string[] => [
  'sh',
  '-c',
  `echo x > ${OUTSIDE[backend].replace(/\/$/, '')}/approval-probe-${tag} && rm -f ${OUTSIDE[backend].replace(/\/$/, '')}/approval-probe-${tag}`,
];

type Answer = (params: Record<string, unknown>) => unknown;

async function session(
  server: TestServer,
  approvalPolicy: unknown,
  answer: Answer,
  extra: Record<string, unknown> = {},
): Promise<{ s: TestSession; asked: Array<Record<string, unknown>> }> {
  const asked: Array<Record<string, unknown>> = [];
  const s = await TestSession.open(
    server.url,
    { session: { approvalPolicy, ...extra } },
    {
      onServerRequest: (method, params) => {
        assert.equal(method, 'approval/request');
        asked.push(params);
        return answer(params);
      },
    },
  );
  return { s, asked };
}

for (const backend of BACKENDS) {
  describe(`approval flows [${backend}]`, { timeout: 300_000 }, () => {
    let server: TestServer;
    test('setup', async () => {
      server = await startServer({ backend, flags: ['--approval-timeout-ms', '800'] });
    });

    test('approve: the denied command is re-run without the sandbox under the same processId', async () => {
      const { s, asked } = await session(server, 'on-failure', () => ({ decision: 'approved' }));
      const r = await s.run('a1', denied(backend, 'a1'));
      assert.equal(asked.length, 1);
      assert.equal(asked[0]?.['purpose'], 'sandbox-retry');
      assert.equal(asked[0]?.['processId'], 'a1');
      assert.deepEqual(asked[0]?.['argv'], denied(backend, 'a1'));
      assert.ok(r.events.some((e) => e.method === 'process/escalated'));
      assert.equal(r.exited['exitCode'], 0);
      assert.equal(r.exited['sandboxDenied'], false);
      await s.close();
    });

    test('approve for session: the second denial of the same command is not asked again', async () => {
      const { s, asked } = await session(server, 'on-failure', () => ({ decision: 'approved-for-session' }));
      const argv = denied(backend, 'same');
      assert.equal((await s.run('s1', argv)).exited['exitCode'], 0);
      assert.equal((await s.run('s2', argv)).exited['exitCode'], 0);
      assert.equal(asked.length, 1);
      const r3 = await s.run('s3', denied(backend, 'other'));
      assert.equal(r3.exited['exitCode'], 0);
      assert.equal(asked.length, 2, 'a different command is asked again');
      await s.close();
    });

    test('deny and abort: reported as sandboxDenied, nothing re-run', async () => {
      for (const decision of ['denied', 'abort']) {
        const { s } = await session(server, 'on-failure', () => ({ decision }));
        const r = await s.run(`d-${decision}`, denied(backend, decision));
        assert.equal(r.exited['sandboxDenied'], true);
        assert.ok(!r.events.some((e) => e.method === 'process/escalated'));
        assert.notEqual(r.exited['exitCode'], 0);
        await s.close();
      }
    });

    test('no answer until the approval timeout counts as denied', async () => {
      const { s, asked } = await session(server, 'on-failure', () => new Promise(() => undefined));
      const t0 = Date.now();
      const r = await s.run('t1', denied(backend, 't1'));
      assert.equal(asked.length, 1);
      assert.ok(Date.now() - t0 >= 700, 'decided before the timeout');
      assert.equal(r.exited['sandboxDenied'], true);
      await s.close();
    });

    test('a malformed answer or an error answer counts as denied', async () => {
      for (const answer of [() => ({ decision: 'sure' }), () => Promise.reject(new Error('client broke'))]) {
        const { s } = await session(server, 'on-failure', answer);
        const r = await s.run(`m-${Math.random().toString(16).slice(2, 6)}`, denied(backend, 'm'));
        assert.equal(r.exited['sandboxDenied'], true);
        await s.close();
      }
    });

    test('the client leaving while asked counts as denied; a later client learns the outcome', async () => {
      let leave: () => void = () => undefined;
      const left = new Promise<void>((resolve) => (leave = resolve));
      const { s } = await session(server, 'on-failure', () => {
        leave();
        return new Promise(() => undefined);
      });
      await s.start('gone', denied(backend, 'gone'));
      await left;
      await s.close();
      await sleep(300);
      const again = await TestSession.open(server.url, { resumeSessionId: s.sessionId });
      const read = await again.request<Record<string, unknown>>('process/read', {
        processId: 'gone',
        afterSeq: 0,
        waitMs: 3000,
      });
      assert.equal(read['exited'], true);
      assert.equal(read['sandboxDenied'], true);
      await again.close();
    });

    test('untrusted asks before the first attempt; a denied start fails with EXEC_ERR_REJECTED and runs nothing', async () => {
      const { s, asked } = await session(server, 'untrusted', () => ({ decision: 'denied' }));
      const info = await s.request<Record<string, unknown>>('session/info', {});
      const marker = `${String(info['workdir'])}/ran`;
      await assert.rejects(
        s.start('u1', ['sh', '-c', `touch ${marker}`]),
        (e: RpcError) => e.code === 'EXEC_ERR_REJECTED',
      );
      assert.equal(asked[0]?.['purpose'], 'initial');
      await assert.rejects(
        s.request('process/read', { processId: 'u1' }),
        (e: RpcError) => e.code === 'EXEC_ERR_PROCESS_NOT_FOUND',
      );
      const check = await TestSession.open(server.url, { session: { sandbox: { type: 'danger-full-access' } } });
      const ls = await check.run('ls', ['sh', '-c', `test -e ${marker} && echo present || echo absent`]);
      assert.equal(ls.stdout, 'absent\n');
      await check.close();
      const pre = await s.run('u2', ['true'], { approval: 'approved' });
      assert.equal(pre.exited['exitCode'], 0);
      assert.equal(asked.length, 1, 'a pre-approved start is not asked');
      await s.close();
    });

    test('require-escalated: only under on-request (and granular); asks, then runs unsandboxed', async () => {
      const { s: never } = await session(server, 'never', () => ({ decision: 'approved' }));
      await assert.rejects(
        never.start('e0', ['true'], { sandboxPermissions: 'require-escalated' }),
        (e: RpcError) => e.code === 'EXEC_ERR_REJECTED',
      );
      await never.close();
      const { s, asked } = await session(server, 'on-request', () => ({ decision: 'approved' }));
      const r = await s.run('e1', denied(backend, 'e1'), { sandboxPermissions: 'require-escalated' });
      assert.equal(asked[0]?.['purpose'], 'initial');
      assert.equal(r.exited['exitCode'], 0, 'ran without the sandbox');
      await s.close();
    });

    test('strictAutoReview: pre-approval is ignored and the retry asks again', async () => {
      const { s, asked } = await session(server, 'untrusted', () => ({ decision: 'approved' }), {
        strictAutoReview: true,
      });
      const r = await s.run('st', denied(backend, 'st'), { approval: 'approved' });
      assert.deepEqual(
        asked.map((a) => a['purpose']),
        ['initial', 'sandbox-retry'],
      );
      assert.equal(r.exited['exitCode'], 0);
      await s.close();
    });

    test('exit 126 with "Permission denied" is a denial; 127 "not found" is not', async () => {
      const { s, asked } = await session(server, 'on-failure', () => ({ decision: 'denied' }));
      const info = await s.request<Record<string, unknown>>('session/info', {});
      const script = `${String(info['workdir'])}/noexec.sh`;
      const r126 = await s.run('x126', ['sh', '-c', `printf 'echo hi\\n' > ${script}; chmod 644 ${script}; ${script}`]);
      assert.equal(r126.exited['exitCode'], 126);
      assert.equal(r126.exited['sandboxDenied'], true);
      const r127 = await s.run('x127', ['sh', '-c', 'no-such-command-here']);
      assert.equal(r127.exited['exitCode'], 127);
      assert.equal(r127.exited['sandboxDenied'], false);
      assert.equal(asked.length, 1);
      await s.close();
    });

    test('every decision is counted in metrics by outcome', async () => {
      const text = await (await fetch(`${server.httpUrl}/metrics`)).text();
      for (const outcome of ['denied-retried', 'denied-reported', 'initial-rejected', 'initial-approved']) {
        assert.match(text, new RegExp(`exec_server_policy_decisions_total\\{outcome="${outcome}"\\} [1-9]`), outcome);
      }
      assert.match(text, /exec_server_approvals_total\{purpose="sandbox-retry",decision="approved"\} [1-9]/);
    });

    test('teardown', async () => {
      await server.close();
    });
  });
}
