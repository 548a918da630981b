import type { SessionPolicy } from '../../src/policy/sandbox-policy.ts';

/** A session policy for the policy unit tests: workspace-write, on-failure approvals, `over` on top. */
export const sessionPolicy = (over: Partial<SessionPolicy> = {}): SessionPolicy => ({
  sandbox: { type: 'workspace-write' },
  denyRead: [],
  approvalPolicy: 'on-failure',
  strictAutoReview: false,
  denialHandling: 'server',
  ...over,
});
