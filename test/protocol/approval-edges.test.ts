/**
 * An approval the server refuses itself because `--max-pending-approvals` of the session are
 * already waiting (src/policy/approval-gate.ts, `pendingLimitRefusal`): the start fails with
 * EXEC_ERR_REJECTED saying so, nobody is asked, and once the waiting ones are answered the next
 * start is asked again. So do approvals nobody decided: no answer within
 * `--approval-timeout-ms`, an error answer, an answer that is no decision, the client gone (the
 * audit log's `why`). A person's refusal keeps its plain message. Against a real server.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { RpcError } from '../../src/client/rpc-connection.ts';
import { startServer, TestSession } from '../support/harness.ts';

test('past --max-pending-approvals a start is refused saying why, without asking anyone', async (t) => {
  const server = await startServer({ flags: ['--max-pending-approvals', '2', '--approval-timeout-ms', '20000'] });
  t.after(() => server.close());
  const asked: string[] = [];
  const answers = new Map<string, (decision: { decision: string }) => void>();
  const s = await TestSession.open(
    server.url,
    { session: { approvalPolicy: 'untrusted' } },
    {
      onServerRequest: (method, params) => {
        assert.equal(method, 'approval/request');
        const id = String(params['processId']);
        asked.push(id);
        return new Promise((resolve) => answers.set(id, resolve));
      },
    },
  );
  t.after(() => s.close());
  const waiting = [s.start('a0', ['echo', 'a0']), s.start('a1', ['echo', 'a1'])];
  await s.waitFor(() => asked.length === 2, 10_000, 'two approval requests');

  await assert.rejects(s.start('a2', ['echo', 'a2']), (e: RpcError) => {
    assert.equal(e.code, 'EXEC_ERR_REJECTED', e.message);
    assert.match(e.message, /^command was not approved \(denied\): /);
    assert.match(e.message, /2 approval requests of this session are already waiting for an answer/);
    assert.match(e.message, /--max-pending-approvals 2/);
    assert.match(e.message, /nobody was asked/);
    return true;
  });
  assert.deepEqual(asked, ['a0', 'a1'], 'the refused start was asked of nobody');

  answers.get('a0')?.({ decision: 'approved' });
  answers.get('a1')?.({ decision: 'approved' });
  await Promise.all(waiting);
  assert.equal((await s.result('a0')).stdout, 'a0\n');

  // Room again: the next start is asked; a person's refusal says no more than that.
  const refused = s.start('a3', ['echo', 'a3']);
  await s.waitFor(() => asked.includes('a3'), 10_000, 'the approval request of a3');
  answers.get('a3')?.({ decision: 'denied' });
  await assert.rejects(refused, (e: RpcError) => {
    assert.equal(e.code, 'EXEC_ERR_REJECTED');
    assert.equal(e.message, 'command was not approved (denied)');
    return true;
  });
});

test('an approval nobody decided says why: the timeout, an error answer, a malformed one, a disconnect', async (t) => {
  const audit = join(await mkdtemp(join(tmpdir(), 'approval-edges-')), 'audit.jsonl');
  const server = await startServer({ flags: ['--approval-timeout-ms', '500', '--audit-log', audit] });
  t.after(() => server.close());
  let s: TestSession | undefined;
  const answers: Record<string, () => unknown> = {
    late: () => new Promise(() => undefined),
    failing: () => {
      throw new Error('no thanks');
    },
    malformed: () => ({ decision: 'yes' }),
    person: () => ({ decision: 'denied' }),
    gone: () => {
      void s?.close();
      return new Promise(() => undefined);
    },
  };
  s = await TestSession.open(
    server.url,
    { session: { approvalPolicy: 'untrusted' } },
    { onServerRequest: async (_method, params) => answers[String(params['processId'])]?.() },
  );
  t.after(() => s?.close());
  const refusedWith = (id: string, message: RegExp | string) =>
    assert.rejects(s!.start(id, ['echo', id]), (e: RpcError) => {
      assert.equal(e.code, 'EXEC_ERR_REJECTED', e.message);
      if (typeof message === 'string') assert.equal(e.message, message);
      else assert.match(e.message, message);
      return true;
    });
  await refusedWith(
    'late',
    /^command was not approved \(denied\): nobody decided: no answer to approval\/request within 500 ms$/,
  );
  await refusedWith(
    'failing',
    /^command was not approved \(denied\): nobody decided: client answered with an error: .*no thanks/,
  );
  await refusedWith(
    'malformed',
    /^command was not approved \(denied\): the answer \{"decision":"yes"\} is not a decision/,
  );
  await refusedWith('person', 'command was not approved (denied)');
  // The client that goes away gets no answer: the audit log says why the start was refused.
  void s.start('gone', ['echo', 'gone']).catch(() => undefined);
  const approvalOf = async (id: string) => {
    const lines = (await readFile(audit, 'utf8')).split('\n').filter(Boolean);
    return lines
      .map((l) => JSON.parse(l) as { action: string; detail: Record<string, unknown> })
      .find((l) => l.action === 'approval' && l.detail['processId'] === id)?.detail;
  };
  const deadline = Date.now() + 10_000;
  while ((await approvalOf('gone')) === undefined && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  const gone = await approvalOf('gone');
  assert.deepEqual([gone?.['decision'], gone?.['why']], ['denied', 'nobody decided: connection closed']);
  assert.equal((await approvalOf('person'))?.['why'], undefined, "a person's refusal has no why");
});
