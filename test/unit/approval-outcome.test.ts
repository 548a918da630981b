/**
 * How an approval the server refused alone is told (src/policy/approval-gate.ts): the pending
 * limit's refusal names the limit and its flag; a refusal someone answered keeps its plain text.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { notApprovedMessage, pendingLimitRefusal } from '../../src/policy/approval-gate.ts';

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
