/** Server-to-client approval requests (DESIGN.md section 4, `approval/request`). */
import type { ProcessId } from '../ids.ts';

export type ApprovalDecision = 'approved' | 'approved-for-session' | 'denied' | 'abort';
export type ApprovalPurpose = 'initial' | 'sandbox-retry';

export interface ApprovalRequest {
  readonly processId: ProcessId;
  readonly argv: readonly string[];
  readonly cwd: string;
  readonly purpose: ApprovalPurpose;
  readonly reason: string;
}

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
