/**
 * The approval rules of docs/protocol.md ("Approvals and the policy gate") as pure functions:
 * what to do before the first attempt, and what to do after a denial. The launcher
 * (src/processes/launcher.ts) carries out the answer.
 */
import { Compile } from 'typebox/compile';
import { ApprovalAnswerSchema, type ApprovalDecision } from '../protocol/index.ts';
import type { ApprovalPolicy, SessionPolicy } from './sandbox-policy.ts';

export type SandboxPermissions = 'use-default' | 'require-escalated';

/** What the client told us up front, plus what the session remembers. */
export interface ApprovalContext {
  readonly policy: SessionPolicy;
  readonly sandboxPermissions: SandboxPermissions;
  /** `approval` hint on the start. */
  readonly preApproved: boolean;
  /** The session cache holds `approved-for-session` for this command. */
  readonly cachedForSession: boolean;
}

export type InitialDecision =
  | { readonly kind: 'reject'; readonly reason: string }
  | { readonly kind: 'ask'; readonly reason: string; readonly thenSandboxed: boolean }
  | { readonly kind: 'run'; readonly sandboxed: boolean; readonly approved: boolean };

export type RetryDecision =
  | { readonly kind: 'report'; readonly reason: string }
  | { readonly kind: 'retry' }
  | { readonly kind: 'ask'; readonly reason: string };

function policyName(p: ApprovalPolicy): string {
  return typeof p === 'string' ? p : 'granular';
}

/** Whether the policy allows asking for (and so running) an unsandboxed attempt. */
export function allowsUnsandboxedRetry(p: ApprovalPolicy): boolean {
  if (typeof p !== 'string') return p.granular.sandboxApproval;
  return p === 'untrusted' || p === 'on-failure';
}

function escalationAllowed(p: ApprovalPolicy): boolean {
  return p === 'on-request' || typeof p !== 'string';
}

/** Step 1: approval before the first attempt. */
export function decideInitial(ctx: ApprovalContext): InitialDecision {
  const { policy } = ctx;
  const strict = policy.strictAutoReview;
  const approved = !strict && (ctx.preApproved || ctx.cachedForSession);
  // Deny-read can only be enforced inside the sandbox, so the first attempt stays sandboxed.
  const canBypass = policy.denyRead.length === 0;
  if (ctx.sandboxPermissions === 'require-escalated') {
    if (!escalationAllowed(policy.approvalPolicy)) {
      return {
        kind: 'reject',
        reason: `approval policy is ${policyName(policy.approvalPolicy)}; you cannot ask for escalated permissions under it`,
      };
    }
    if (approved) return { kind: 'run', sandboxed: !canBypass, approved: true };
    return { kind: 'ask', reason: 'command asks to run without the sandbox', thenSandboxed: !canBypass };
  }
  if (policy.approvalPolicy === 'untrusted' && !approved) {
    return { kind: 'ask', reason: 'approval policy untrusted: every command needs approval', thenSandboxed: true };
  }
  return { kind: 'run', sandboxed: true, approved };
}

/** Step 4: after a sandboxed attempt was classified as denied. `approved`: the start was approved already. */
export function decideRetry(policy: SessionPolicy, approved: boolean): RetryDecision {
  if (policy.denialHandling === 'report') return { kind: 'report', reason: 'denials are reported to the client' };
  if (!allowsUnsandboxedRetry(policy.approvalPolicy)) {
    return {
      kind: 'report',
      reason: `approval policy ${policyName(policy.approvalPolicy)} does not allow an unsandboxed retry`,
    };
  }
  if (policy.denyRead.length > 0)
    return { kind: 'report', reason: 'a deny-read list forbids running without the sandbox' };
  if (approved && !policy.strictAutoReview) return { kind: 'retry' };
  return { kind: 'ask', reason: 'command failed; retry without sandbox?' };
}

/**
 * How an approval request ended: the decision, and why when the server decided it without
 * anyone's decision (`--max-pending-approvals` reached, no answer in time, the client gone, an
 * answer that is no decision). Without `why`, someone answered.
 */
export interface ApprovalOutcome {
  readonly decision: ApprovalDecision;
  readonly why?: string | undefined;
}

/**
 * The refusal of an approval asked while `limit` others of the session wait for an answer:
 * nobody is asked, and the client is told it may ask again once those are answered.
 */
export function pendingLimitRefusal(limit: number): ApprovalOutcome {
  return {
    decision: 'denied',
    why: `${limit} approval request${limit === 1 ? '' : 's'} of this session ${limit === 1 ? 'is' : 'are'} already waiting for an answer (--max-pending-approvals ${limit}); nobody was asked, try again once they are answered`,
  };
}

const isApprovalAnswer = Compile(ApprovalAnswerSchema);

/** How long a malformed answer may be when quoted back. */
const QUOTED_ANSWER_CHARS = 200;

/**
 * The outcome of what the client answered to `approval/request`: its decision, or a refusal
 * saying the answer was none (fail closed), quoting it (cut) so the client can see its mistake.
 */
export function answeredOutcome(answer: unknown): ApprovalOutcome {
  if (isApprovalAnswer.Check(answer)) return { decision: answer.decision };
  const text = JSON.stringify(answer) ?? String(answer);
  const quoted = text.length > QUOTED_ANSWER_CHARS ? `${text.slice(0, QUOTED_ANSWER_CHARS)}...` : text;
  return {
    decision: 'denied',
    why: `the answer ${quoted} is not a decision (expected {"decision": "approved"|"approved-for-session"|"denied"|"abort"})`,
  };
}

/**
 * The refusal of an approval request that got no answer; `err` says why: no answer within
 * `--approval-timeout-ms`, the connection closed, an error answer, no client to ask.
 */
export function unansweredRefusal(err: unknown): ApprovalOutcome {
  const message = err instanceof Error ? err.message : String(err);
  return { decision: 'denied', why: `nobody decided: ${message}` };
}

/**
 * `what (decision)`, then why when the server decided alone: the message of a start
 * (`command was not approved`) or a retry (`retry not approved`) its approval refused.
 */
export function notApprovedMessage(what: string, outcome: ApprovalOutcome): string {
  const why = outcome.why === undefined ? '' : `: ${outcome.why}`;
  return `${what} (${outcome.decision})${why}`;
}
