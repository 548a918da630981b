/** Approval decisions (src/policy/approvals.ts): which answers approve, and the per-session cache key. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { approvalKey, isApproval, MAX_SESSION_APPROVALS, SessionApprovals } from '../../src/policy/approvals.ts';

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

test('a cache key costs the same for a 2 MiB argv as for a short one', () => {
  assert.equal(approvalKey(['x'.repeat(2 * 1024 * 1024)]).length, approvalKey(['true']).length);
  assert.ok(approvalKey(['true']).length <= 64);
});

test('a session remembers the most recent approvals only, the oldest forgotten first', () => {
  const approvals = new SessionApprovals();
  for (let i = 0; i < MAX_SESSION_APPROVALS; i++) approvals.add(approvalKey(['cmd', String(i)]));
  approvals.add(approvalKey(['cmd', '0'])); // approved again: now the most recent
  approvals.add(approvalKey(['cmd', 'new']));
  assert.equal(approvals.size, MAX_SESSION_APPROVALS);
  assert.equal(approvals.has(approvalKey(['cmd', '1'])), false, 'the oldest went');
  for (const kept of ['0', '2', 'new']) assert.equal(approvals.has(approvalKey(['cmd', kept])), true, kept);
});
