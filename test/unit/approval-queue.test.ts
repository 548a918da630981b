/**
 * Approvals for HTTP-only agents (src/tools/approval-queue.ts): a tool run's outcomes, the queue
 * that routes a process's approval to the run that owns it, decisions, expiry, and the wire form.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { execError } from '../../src/errors.ts';
import { asProcessId } from '../../src/ids.ts';
import type { ExecToolResult } from '../../src/protocol/index.ts';
import {
  approvalRequiredBody,
  asReply,
  HttpApprovalQueue,
  outcomeReply,
  runFacadeCall,
  ToolRun,
} from '../../src/tools/approval-queue.ts';

const request = (processId: string) => ({
  processId,
  argv: ['rm', 'x'],
  cwd: '/w',
  purpose: 'sandbox-retry' as const,
  reason: 'r',
});
const result = {
  chunk_id: 'c',
  wall_time_seconds: 0,
  original_token_count: 0,
  output: '',
  text: 'ok',
} as ExecToolResult;

test('asReply: a result is 200; a failure its registry status and {code, message}', async () => {
  assert.deepEqual(await asReply(async () => result), { statusCode: 200, body: result });
  assert.deepEqual(
    await asReply(async () => {
      throw execError('EXEC_ERR_SESSION_DEAD', 'gone');
    }),
    { statusCode: 410, body: { code: 'EXEC_ERR_SESSION_DEAD', message: 'gone' } },
  );
});

test('a facade call with no approval resolves with its reply', async () => {
  assert.deepEqual(await runFacadeCall(async () => result), {
    kind: 'reply',
    reply: { statusCode: 200, body: result },
  });
});

test('an approval comes out before the reply; deciding it lets the run go on and pauses its clock meanwhile', async () => {
  const queue = new HttpApprovalQueue();
  const run = new ToolRun<ExecToolResult>('call-1');
  const release = queue.own(asProcessId('p1'), run);
  run.start(async () => {
    const answer = await queue.request('approval/request', request('p1'), 10_000);
    assert.deepEqual(answer, { decision: 'approved' });
    return { statusCode: 200, body: result };
  });
  const first = await run.nextOutcome();
  assert.equal(first.kind, 'approval');
  if (first.kind !== 'approval') return;
  assert.equal(run.approvalPending, true);
  assert.match(first.approval.id, /^appr_[0-9a-f]{20}$/);
  assert.deepEqual(
    queue.list().map((a) => a.id),
    [first.approval.id],
  );
  await sleep(20);
  assert.ok(run.pausedMs >= 15);
  assert.equal(queue.decide(first.approval.id, 'approved'), first.approval);
  assert.equal(run.approvalPending, false);
  assert.deepEqual(await run.nextOutcome(), { kind: 'reply', reply: { statusCode: 200, body: result } });
  const paused = run.pausedMs;
  await sleep(10);
  assert.equal(run.pausedMs, paused, 'the clock runs again once decided');
  assert.throws(() => queue.decide(first.approval.id, 'denied'), { code: 'EXEC_ERR_APPROVAL_NOT_FOUND' });
  release();
  await assert.rejects(queue.request('approval/request', request('p1'), 10), /no client is attached/);
});

test('requests without an owning run, or of another method, are refused', async () => {
  const queue = new HttpApprovalQueue();
  await assert.rejects(queue.request('approval/request', request('nobody'), 10), /no client is attached/);
  await assert.rejects(queue.request('other/method', {}, 10), /unsupported request other\/method/);
  const releaseOld = queue.own(asProcessId('p'), new ToolRun(undefined));
  const newer = new ToolRun(undefined);
  queue.own(asProcessId('p'), newer);
  releaseOld();
  const pending = queue.request('approval/request', request('p'), 10_000);
  assert.equal(queue.list()[0]?.run, newer, 'an old owner releasing leaves the newer one');
  queue.close();
  assert.deepEqual(await pending, { decision: 'denied' }, 'close denies what is pending');
  assert.deepEqual(queue.list(), []);
});

test('an unanswered approval expires: the request fails and the run is no longer paused', async () => {
  const queue = new HttpApprovalQueue();
  const run = new ToolRun(undefined);
  queue.own(asProcessId('p'), run);
  const pending = queue.request('approval/request', request('p'), 20);
  const expires = Date.parse(queue.list()[0]?.expiresAt ?? '') - Date.parse(queue.list()[0]?.createdAt ?? '');
  assert.equal(expires, 20);
  await assert.rejects(pending, /approval timed out/);
  assert.equal(run.approvalPending, false);
  assert.deepEqual(queue.list(), []);
});

test('the wire form of an approval, with the call id when there is one; outcomeReply answers 202', () => {
  const run = new ToolRun(undefined);
  const approval = {
    id: 'appr_1',
    request: request('p'),
    createdAt: '2026-01-01T00:00:00.000Z',
    expiresAt: '2026-01-01T00:01:00.000Z',
    run,
  };
  const body = approvalRequiredBody(approval, 'call-9');
  assert.deepEqual(body, {
    status: 'approval_required',
    call_id: 'call-9',
    approval_id: 'appr_1',
    approval: {
      id: 'appr_1',
      purpose: 'sandbox-retry',
      reason: 'r',
      argv: ['rm', 'x'],
      cwd: '/w',
      createdAt: approval.createdAt,
      expiresAt: approval.expiresAt,
    },
  });
  assert.equal('call_id' in approvalRequiredBody(approval, undefined), false);
  assert.deepEqual(outcomeReply({ kind: 'approval', approval }, undefined), {
    statusCode: 202,
    body: approvalRequiredBody(approval, undefined),
  });
  const reply = { statusCode: 200 as const, body: result };
  assert.equal(outcomeReply({ kind: 'reply', reply }, 'c'), reply);
});
