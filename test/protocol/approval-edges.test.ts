/**
 * An approval the server refuses itself because `--max-pending-approvals` of the session are
 * already waiting (src/policy/approval-gate.ts, `pendingLimitRefusal`): the start fails with
 * EXEC_ERR_REJECTED saying so, nobody is asked, and once the waiting ones are answered the next
 * start is asked again. A person's refusal keeps its plain message. Against a real server.
 */
import assert from 'node:assert/strict';
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
