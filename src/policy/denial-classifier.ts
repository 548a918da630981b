/**
 * Decides whether a failed sandboxed attempt looks like a sandbox denial: Codex's
 * `is_likely_sandbox_denied`, in the same order (docs/protocol.md, "Approvals and the policy gate").
 */
import type { SandboxType } from '../backends/types.ts';

const KEYWORDS = [
  'operation not permitted',
  'permission denied',
  'read-only file system',
  'seccomp',
  'sandbox',
  'landlock',
  'failed to write file',
] as const;
const SIGSYS = 31;

/** What the classifier sees of a sandboxed attempt that ended in its early-exit window. */
export interface AttemptOutcome {
  readonly sandboxType: SandboxType;
  /** Wire exit code (128+N for a signal). */
  readonly exitCode: number;
  /** All output of the attempt (stdout, stderr or pty), as text. */
  readonly output: string;
}

/**
 * Whether an early failure looks like the sandbox's doing, judged as Codex judges it: such an
 * attempt may be retried or reported.
 */
export function isLikelySandboxDenied(outcome: AttemptOutcome): boolean {
  if (outcome.sandboxType === 'none' || outcome.exitCode === 0) return false;
  const text = outcome.output.toLowerCase();
  if (KEYWORDS.some((k) => text.includes(k))) return true;
  if (outcome.exitCode === 2 || outcome.exitCode === 126 || outcome.exitCode === 127) return false;
  return outcome.sandboxType === 'bubblewrap' && outcome.exitCode === 128 + SIGSYS;
}
