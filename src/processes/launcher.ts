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
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import { decideInitial, decideRetry, type SandboxPermissions } from '../policy/approval-gate.ts';
import {
  approvalKey,
  isApproval,
  type ApprovalDecision,
  type ApprovalPurpose,
  type ApprovalRequester,
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

/** The early-exit window, measured from the moment the attempt runs. */
export const EARLY_EXIT_WINDOW_MS = 150;

export interface LauncherContext {
  readonly backend: BackendSession;
  readonly policy: SessionPolicy;
  readonly requestApproval: ApprovalRequester;
  readonly approvalCache: Set<string>;
  readonly metrics: Metrics;
  readonly log: Logger;
  /** Optional: refuses a start the session cannot take now (past its disk limit), before anything runs. */
  readonly admit?: (() => Promise<void>) | undefined;
}

export interface GateInput {
  readonly sandboxPermissions: SandboxPermissions;
  /** The caller's reason for `require-escalated` (Codex's `justification`), added to the approval's reason. */
  readonly justification?: string | undefined;
  readonly approval?: 'approved' | 'approved-for-session' | undefined;
  readonly narrowing?: SandboxNarrowing | undefined;
  /** Spawn request without its sandbox, which the gate decides. */
  readonly spawn: Omit<SpawnRequest, 'sandbox'>;
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
): Promise<ApprovalDecision> {
  const decision = await ctx.requestApproval({
    processId: proc.id,
    argv: [...proc.spec.argv],
    cwd: proc.spec.cwd,
    purpose,
    reason,
  });
  ctx.metrics.approvals.inc({ purpose, decision });
  if (decision === 'approved-for-session') ctx.approvalCache.add(approvalKey(proc.spec.argv));
  return decision;
}

function decide(ctx: LauncherContext, proc: ManagedProcess, outcome: string, extra: object = {}): void {
  ctx.metrics.policyDecisions.inc({ outcome });
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
  let approved: boolean;
  let sandboxed: boolean;
  switch (initial.kind) {
    case 'reject':
      decide(ctx, proc, 'initial-rejected', { reason: initial.reason });
      throw execError('EXEC_ERR_REJECTED', initial.reason);
    case 'ask': {
      const why = input.sandboxPermissions === 'require-escalated' ? input.justification?.trim() : undefined;
      const decision = await ask(ctx, proc, 'initial', why ? `${initial.reason}: ${why}` : initial.reason);
      if (!isApproval(decision)) {
        decide(ctx, proc, 'initial-rejected', { decision });
        throw execError('EXEC_ERR_REJECTED', `command was not approved (${decision})`);
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
        ctx.approvalCache.add(approvalKey(proc.spec.argv));
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
    proc.release(attempt);
    return;
  }
  let decision = proc.endRequested
    ? { kind: 'report' as const, reason: 'process was terminated' }
    : decideRetry(ctx.policy, approved);
  if (decision.kind === 'ask') {
    const answer = await ask(ctx, proc, 'sandbox-retry', decision.reason);
    decision =
      isApproval(answer) && !proc.endRequested
        ? { kind: 'retry' }
        : { kind: 'report', reason: `retry not approved (${answer})` };
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
