/** Server-to-client approval requests (`approval/request`, docs/protocol.md; wire shapes in src/protocol/session.ts). */
import type { ApprovalDecision, ApprovalRequest } from '../protocol/index.ts';

export type { ApprovalDecision, ApprovalPurpose, ApprovalRequest } from '../protocol/index.ts';

/**
 * Asks whoever is attached to the session. Must resolve (never reject): no client, a
 * disconnect or the approval timeout all resolve `denied` (fail closed).
 */
export type ApprovalRequester = (request: ApprovalRequest) => Promise<ApprovalDecision>;

export function isApproval(decision: ApprovalDecision): boolean {
  return decision === 'approved' || decision === 'approved-for-session';
}

/** Key of the per-session approval cache (`approved-for-session`). */
export function approvalKey(argv: readonly string[]): string {
  return JSON.stringify(argv);
}
