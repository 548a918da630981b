/** Server-to-client approval requests (`approval/request`, docs/protocol.md; wire shapes in src/protocol/session.ts). */
import { createHash } from 'node:crypto';
import type { ApprovalDecision, ApprovalRequest } from '../protocol/index.ts';
import type { ApprovalOutcome } from './approval-gate.ts';

export type { ApprovalDecision, ApprovalPurpose, ApprovalRequest } from '../protocol/index.ts';

/**
 * Asks whoever is attached to the session. Must resolve (never reject): no client, a
 * disconnect, the approval timeout or too many approvals waiting all resolve `denied` (fail
 * closed), the last with its `why`.
 */
export type ApprovalRequester = (request: ApprovalRequest) => Promise<ApprovalOutcome>;

/** Whether a decision lets the command run (once or for the session). */
export function isApproval(decision: ApprovalDecision): boolean {
  return decision === 'approved' || decision === 'approved-for-session';
}

/**
 * Key of the per-session approval cache (`approved-for-session`): a digest, so that an entry
 * costs the same whatever the argv (up to 2 MiB) it stands for.
 */
export function approvalKey(argv: readonly string[]): string {
  return createHash('sha256').update(JSON.stringify(argv)).digest('base64url');
}

/** Commands one session remembers as approved for the session, at most. */
export const MAX_SESSION_APPROVALS = 1024;

/**
 * The commands approved for the session (`approved-for-session`), the most recent
 * `MAX_SESSION_APPROVALS` of them: past that the oldest is forgotten, and asked about again the
 * next time it runs, rather than the set growing with every command a client approves.
 */
export class SessionApprovals {
  readonly #keys = new Set<string>();
  readonly #onAdd: () => Promise<void>;

  /**
   * `onAdd` runs after each `add`: the session stores its record, so approvals survive a restart.
   * It must not reject (a failed store is the session's to report).
   */
  constructor(onAdd: () => Promise<void> = () => Promise.resolve()) {
    this.#onAdd = onAdd;
  }

  has(key: string): boolean {
    return this.#keys.has(key);
  }

  /** Remembers `key`; resolves once `onAdd` has (the approved command waits for its record). */
  add(key: string): Promise<void> {
    this.#keys.delete(key);
    this.#keys.add(key);
    if (this.#keys.size > MAX_SESSION_APPROVALS) {
      const oldest = this.#keys.values().next().value;
      if (oldest !== undefined) this.#keys.delete(oldest);
    }
    return this.#onAdd();
  }

  /** The keys, oldest first (stored with the session's record). */
  entries(): string[] {
    return [...this.#keys];
  }

  /** The keys a stored record lists, oldest first (a re-adopted session; `onAdd` is not run). */
  restore(keys: readonly string[]): void {
    for (const key of keys.slice(-MAX_SESSION_APPROVALS)) this.#keys.add(key);
  }

  get size(): number {
    return this.#keys.size;
  }
}
