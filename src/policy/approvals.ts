/** Server-to-client approval requests (`approval/request`, docs/protocol.md; wire shapes in src/protocol/session.ts). */
import type { ApprovalDecision, ApprovalRequest } from '../protocol/index.ts';
import type { ApprovalOutcome } from './approval-gate.ts';

export type { ApprovalDecision, ApprovalPurpose, ApprovalRequest } from '../protocol/index.ts';

/**
 * Asks whoever is attached to the session. Must resolve (never reject): no client, a
 * disconnect, the approval timeout or too many approvals waiting all resolve `denied` (fail
 * closed), the last with its `why`.
 */
export type ApprovalRequester = (request: ApprovalRequest) => Promise<ApprovalOutcome>;

export function isApproval(decision: ApprovalDecision): boolean {
  return decision === 'approved' || decision === 'approved-for-session';
}

/** Key of the per-session approval cache (`approved-for-session`). */
export function approvalKey(argv: readonly string[]): string {
  return JSON.stringify(argv);
}
