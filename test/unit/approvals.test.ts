/** Approval decisions (src/policy/approvals.ts): which answers approve, and the per-session cache key. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { approvalKey, isApproval } from '../../src/policy/approvals.ts';

test('approved and approved-for-session approve; denied and abort do not', () => {
  assert.equal(isApproval('approved'), true);
  assert.equal(isApproval('approved-for-session'), true);
  assert.equal(isApproval('denied'), false);
  assert.equal(isApproval('abort'), false);
});

test('the cache key tells argv apart exactly, including spaces inside arguments', () => {
  assert.equal(approvalKey(['rm', '-rf', 'x']), approvalKey(['rm', '-rf', 'x']));
  assert.notEqual(approvalKey(['rm', '-rf x']), approvalKey(['rm', '-rf', 'x']));
  assert.notEqual(approvalKey(['a']), approvalKey(['a', '']));
});
