/**
 * How an approval the server refused alone is told (src/policy/approval-gate.ts): the pending
 * limit's refusal names the limit and its flag; an answer that is no decision is quoted, an
 * approval nobody answered says why; a refusal someone answered keeps its plain text.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  answeredOutcome,
  notApprovedMessage,
  pendingLimitRefusal,
  unansweredRefusal,
} from '../../src/policy/approval-gate.ts';
import { execError } from '../../src/errors.ts';

test('the pending limit refuses with the limit, its flag and what to do', () => {
  const two = pendingLimitRefusal(2);
  assert.equal(two.decision, 'denied');
  assert.equal(
    notApprovedMessage('command was not approved', two),
    'command was not approved (denied): 2 approval requests of this session are already waiting for an answer ' +
      '(--max-pending-approvals 2); nobody was asked, try again once they are answered',
  );
  assert.match(pendingLimitRefusal(1).why ?? '', /^1 approval request of this session is already waiting/);
});

test('a decision someone made is told as it was', () => {
  assert.equal(
    notApprovedMessage('command was not approved', { decision: 'abort' }),
    'command was not approved (abort)',
  );
  assert.equal(notApprovedMessage('retry not approved', { decision: 'denied' }), 'retry not approved (denied)');
});

test('an answer that is no decision is refused, quoted (cut); a decision is taken as it is', () => {
  assert.deepEqual(answeredOutcome({ decision: 'approved-for-session' }), { decision: 'approved-for-session' });
  assert.deepEqual(answeredOutcome({ decision: 'denied' }), { decision: 'denied' });
  const yes = answeredOutcome({ decision: 'yes' });
  assert.equal(yes.decision, 'denied');
  assert.equal(
    notApprovedMessage('command was not approved', yes),
    'command was not approved (denied): the answer {"decision":"yes"} is not a decision ' +
      '(expected {"decision": "approved"|"approved-for-session"|"denied"|"abort"})',
  );
  assert.match(answeredOutcome(undefined).why ?? '', /^the answer undefined is not a decision/);
  const long = answeredOutcome({ decision: 'x'.repeat(10_000) }).why ?? '';
  assert.ok(long.length < 400, `${long.length} chars`);
  assert.match(long, /x\.\.\. is not a decision/);
});

test('an approval nobody answered is denied saying why', () => {
  const timedOut = unansweredRefusal(execError('EXEC_ERR_REJECTED', 'no answer to approval/request within 500 ms'));
  assert.deepEqual(timedOut, {
    decision: 'denied',
    why: 'nobody decided: no answer to approval/request within 500 ms',
  });
  assert.equal(
    notApprovedMessage('retry not approved', unansweredRefusal(new Error('connection closed'))),
    'retry not approved (denied): nobody decided: connection closed',
  );
});
