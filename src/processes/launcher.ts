/**
 * Carries one process start through the policy gate (docs/architecture.md, "Data flow of one
 * command"): approval before the first attempt, the sandboxed attempt, the 150 ms early-exit
 * window with held output, the denial classifier, and then either an unsandboxed retry under
 * the same process id or a report of `sandboxDenied`. What to do at each step is decided by the
 * pure functions of src/policy/; the process's transitions are ManagedProcess's. The start's
 * reply goes out as soon as the first attempt runs; everything after that runs in the background.
 */
import { setTimeout as delay } from 'node:timers/promises';
import type { BackendExit, BackendSession, ResolvedSandbox, SpawnRequest } from '../backends/types.ts';
import { execError } from '../errors.ts';
import { checkSandboxType } from '../sessions/session-spec.ts';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import {
  type ApprovalOutcome,
  decideInitial,
  decideRetry,
  notApprovedMessage,
  type SandboxPermissions,
} from '../policy/approval-gate.ts';
import {
  approvalKey,
  isApproval,
  type ApprovalPurpose,
  type ApprovalRequester,
  type SessionApprovals,
} from '../policy/approvals.ts';
import { isLikelySandboxDenied } from '../policy/denial-classifier.ts';
import {
  resolveSandbox,
  sessionWorkspaces,
  sandboxedEnvironment,
  type SandboxNarrowing,
  type SessionPolicy,
} from '../policy/sandbox-policy.ts';
import type { Attempt } from './attempt.ts';
import type { ManagedProcess } from './managed-process.ts';
import { withHome } from './environment.ts';
import { type AuditActor, redactEnv } from '../audit/auditor.ts';

/** The early-exit window, measured from the moment the attempt runs. */
export const EARLY_EXIT_WINDOW_MS = 150;

/** What the launcher uses of its session: the backend, the policy, the approvals and where to report. */
export interface LauncherContext {
  readonly backend: BackendSession;
  readonly policy: SessionPolicy;
  readonly requestApproval: ApprovalRequester;
  readonly approvalCache: Pick<SessionApprovals, 'add' | 'has'>;
  readonly metrics: Metrics;
  readonly log: Logger;
  /** Optional: refuses a start the session cannot take now (past its disk limit), before anything runs. */
  readonly admit?: (() => Promise<void>) | undefined;
  /** Optional: records an audit event of the session (`actor` overrides the current caller). */
  readonly audit?: ((action: string, detail: Record<string, unknown>, actor?: AuditActor) => void) | undefined;
  /**
   * The sandbox types the session's tenant may ask for (`--allowed-sandbox-types`); absent: all.
   * Without `danger-full-access` among them no attempt runs outside the sandbox: an escalation
   * is refused and a denied attempt is reported instead of retried.
   */
  readonly sandboxTypes?: readonly string[] | undefined;
}

/** Whether an attempt outside the sandbox is forbidden to this session (`--allowed-sandbox-types`). */
function unsandboxedForbidden(ctx: LauncherContext): boolean {
  return (
    ctx.policy.sandbox.type !== 'danger-full-access' &&
    ctx.sandboxTypes !== undefined &&
    !ctx.sandboxTypes.includes('danger-full-access')
  );
}

/** A start as the policy gate judges it: the asked permissions and approval, and the request without its sandbox. */
export interface GateInput {
  readonly sandboxPermissions: SandboxPermissions;
  /** The caller's reason for `require-escalated` (Codex's `justification`), added to the approval's reason. */
  readonly justification?: string | undefined;
  readonly approval?: 'approved' | 'approved-for-session' | undefined;
  readonly narrowing?: SandboxNarrowing | undefined;
  /** Spawn request without its sandbox, which the gate decides. */
  readonly spawn: Omit<SpawnRequest, 'sandbox'>;
  /** The variables the caller set for this start (their names go to the audit log, never their values). */
  readonly requestedEnv?: Readonly<Record<string, string>> | undefined;
  /** What a restarted server needs to re-adopt the attempt, given its first seq and sandbox. */
  readonly recoveryTag?: ((seqBase: number, sandboxed: boolean) => string) | undefined;
}

function wireExitCode(exit: BackendExit): number {
  if (exit.kind === 'exited') return exit.code;
  if (exit.kind === 'signaled') return 128 + exit.signo;
  return -1;
}

async function ask(
  ctx: LauncherContext,
  proc: ManagedProcess,
  purpose: ApprovalPurpose,
  reason: string,
): Promise<ApprovalOutcome> {
  const outcome = await ctx.requestApproval({
    processId: proc.id,
    argv: [...proc.spec.argv],
    cwd: proc.spec.cwd,
    purpose,
    reason,
  });
  const { decision, why } = outcome;
  ctx.metrics.approvals.inc({ purpose, decision });
  ctx.audit?.('approval', { processId: proc.id, purpose, reason, decision, ...(why === undefined ? {} : { why }) });
  if (decision === 'approved-for-session') await ctx.approvalCache.add(approvalKey(proc.spec.argv));
  return outcome;
}

function decide(ctx: LauncherContext, proc: ManagedProcess, outcome: string, extra: object = {}): void {
  ctx.metrics.policyDecisions.inc({ outcome });
  // The early-exit window's verdicts on a denial are their own action; the rest are the gate's.
  ctx.audit?.(outcome.startsWith('denied-') ? 'denial.verdict' : 'policy.decision', {
    processId: proc.id,
    outcome,
    ...extra,
  });
  ctx.log.info({ processId: proc.id, outcome, ...extra }, 'policy decision');
}

async function spawnAttempt(
  ctx: LauncherContext,
  proc: ManagedProcess,
  input: GateInput,
  sandbox: ResolvedSandbox,
): Promise<Attempt> {
  const wouldSandbox = sandbox.kind === 'restricted' && ctx.backend.sandboxType !== 'none';
  const { attempt, sink } = proc.beginAttempt(wouldSandbox);
  const started = performance.now();
  const recoveryTag = input.recoveryTag?.(proc.log.nextSeq, wouldSandbox);
  const facts = ctx.backend.environment;
  const home = (wouldSandbox ? facts.sandboxHomeDir : undefined) ?? facts.homeDir;
  const process = await ctx.backend.spawn(
    { ...input.spawn, env: withHome(sandboxedEnvironment(input.spawn.env, sandbox), home), sandbox, recoveryTag },
    sink,
  );
  proc.attemptRunning(attempt, process);
  ctx.audit?.('process.start', {
    processId: proc.id,
    argv: [...input.spawn.argv],
    cwd: input.spawn.cwd,
    tty: input.spawn.mode === 'pty',
    env: redactEnv(input.requestedEnv) ?? {},
    sandboxed: wouldSandbox,
    sandboxType: proc.sandboxType,
  });
  ctx.metrics.startLatency.observe({ sandbox: proc.sandboxType }, (performance.now() - started) / 1000);
  ctx.metrics.processesStarted.inc({ mode: input.spawn.mode, sandbox: proc.sandboxType });
  return attempt;
}

/**
 * Runs the first attempt (after any initial approval) and returns once it is running.
 * Throws `EXEC_ERR_REJECTED` when the start is refused; nothing runs then.
 */
export async function launch(ctx: LauncherContext, proc: ManagedProcess, input: GateInput): Promise<void> {
  const { policy } = ctx;
  const cached = ctx.approvalCache.has(approvalKey(proc.spec.argv));
  const initial = decideInitial({
    policy,
    sandboxPermissions: input.sandboxPermissions,
    preApproved: input.approval !== undefined,
    cachedForSession: cached,
  });
  // Refused before anyone is asked: no approval can grant what the operator forbids.
  const outside = initial.kind === 'run' ? !initial.sandboxed : initial.kind === 'ask' && !initial.thenSandboxed;
  if (outside && unsandboxedForbidden(ctx)) {
    decide(ctx, proc, 'escalation-forbidden');
    checkSandboxType('danger-full-access', ctx.sandboxTypes ?? [], 'running a command outside the sandbox');
  }
  let approved: boolean;
  let sandboxed: boolean;
  switch (initial.kind) {
    case 'reject':
      decide(ctx, proc, 'initial-rejected', { reason: initial.reason });
      throw execError('EXEC_ERR_REJECTED', initial.reason);
    case 'ask': {
      const why = input.sandboxPermissions === 'require-escalated' ? input.justification?.trim() : undefined;
      const outcome = await ask(ctx, proc, 'initial', why ? `${initial.reason}: ${why}` : initial.reason);
      const { decision } = outcome;
      if (!isApproval(decision)) {
        decide(ctx, proc, 'initial-rejected', { decision });
        throw execError('EXEC_ERR_REJECTED', notApprovedMessage('command was not approved', outcome));
      }
      decide(ctx, proc, 'initial-approved', { decision });
      approved = true;
      sandboxed = initial.thenSandboxed;
      break;
    }
    case 'run':
      approved = initial.approved;
      sandboxed = initial.sandboxed;
      if (input.approval === 'approved-for-session' && !policy.strictAutoReview)
        await ctx.approvalCache.add(approvalKey(proc.spec.argv));
  }
  if (input.sandboxPermissions === 'require-escalated' && !sandboxed) decide(ctx, proc, 'escalated-first-attempt');
  const sandbox: ResolvedSandbox = sandboxed
    ? resolveSandbox(policy, sessionWorkspaces(ctx.backend), input.narrowing)
    : { kind: 'unrestricted' };
  const attempt = await spawnAttempt(ctx, proc, input, sandbox);
  if (attempt.holding) void watchWindow(ctx, proc, input, attempt, approved);
}

async function watchWindow(
  ctx: LauncherContext,
  proc: ManagedProcess,
  input: GateInput,
  attempt: Attempt,
  approved: boolean,
): Promise<void> {
  const exit = await Promise.race([attempt.exited, delay(EARLY_EXIT_WINDOW_MS, undefined, { ref: false })]);
  // Backends deliver the exit only after the attempt's last output chunk (ProcessSink
  // contract), so no trailing output can follow it. Released early (it printed past the hold
  // budget) or still running: it streams normally and a later failure is a plain exit.
  if (exit === undefined || !attempt.holding) {
    proc.release(attempt);
    return;
  }
  const exitCode = wireExitCode(exit);
  if (!isLikelySandboxDenied({ sandboxType: proc.sandboxType, exitCode, output: attempt.heldText() })) {
    // A failure the classifier judged not to be the sandbox's is a verdict too (a success is not).
    if (exitCode !== 0) ctx.audit?.('denial.verdict', { processId: proc.id, outcome: 'not-denied', exitCode });
    proc.release(attempt);
    return;
  }
  let decision = proc.endRequested
    ? { kind: 'report' as const, reason: 'process was terminated' }
    : unsandboxedForbidden(ctx)
      ? { kind: 'report' as const, reason: 'running outside the sandbox is not allowed (--allowed-sandbox-types)' }
      : decideRetry(ctx.policy, approved);
  if (decision.kind === 'ask') {
    const answer = await ask(ctx, proc, 'sandbox-retry', decision.reason);
    decision =
      isApproval(answer.decision) && !proc.endRequested
        ? { kind: 'retry' }
        : { kind: 'report', reason: notApprovedMessage('retry not approved', answer) };
  }
  if (decision.kind === 'report') {
    decide(ctx, proc, 'denied-reported', { reason: decision.reason, exitCode });
    proc.release(attempt, true);
    return;
  }
  decide(ctx, proc, 'denied-retried', { exitCode });
  proc.retry(attempt, 'sandbox denied the command; re-running without the sandbox');
  try {
    await spawnAttempt(ctx, proc, input, { kind: 'unrestricted' });
  } catch (err) {
    ctx.log.warn({ processId: proc.id, err }, 'unsandboxed retry failed to start');
    proc.fail(`retry failed to start: ${(err as Error).message}`);
  }
}
