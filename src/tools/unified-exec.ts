/**
 * Codex's unified exec served over HTTP (docs/protocol.md, "Tool facade"): `exec_command`
 * starts a command in the session and waits up to its yield time; a command still running
 * then is kept under a numeric `session_id` (random 1000..100000, as Codex allocates them)
 * that `write_stdin` writes to and polls. Output between calls accumulates in a 1 MiB
 * head/tail buffer; what a call returns is middle-truncated to `max_output_tokens`.
 */
import { randomInt, randomUUID } from 'node:crypto';
import { posix } from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { setTimeout as delay } from 'node:timers/promises';
import { execError } from '../errors.ts';
import { asProcessId, type ProcessId } from '../ids.ts';
import { decideInitial } from '../policy/approval-gate.ts';
import type { LogEvent } from '../processes/output-log.ts';
import { pruneVictim } from '../processes/pruning.ts';
import type { ExecCommandArgs, ExecToolResult, WriteStdinArgs } from '../protocol/index.ts';
import type { SessionPolicy } from '../policy/sandbox-policy.ts';
import type { ProcessTable } from '../processes/process-table.ts';
import { toFieldPath } from '../protocol/index.ts';
import { HttpApprovalQueue, type ToolRun } from './approval-queue.ts';
import { buildResult } from './format.ts';
import { HeadTailBuffer } from './head-tail-buffer.ts';

/** Shortest wait of any call (Codex's bounds and defaults follow). */
export const MIN_YIELD_TIME_MS = 250;
/** Longest wait of `exec_command` and of a `write_stdin` that writes. */
export const MAX_YIELD_TIME_MS = 30_000;
/** Shortest wait of a `write_stdin` poll (empty `chars`). */
export const MIN_EMPTY_YIELD_TIME_MS = 5_000;
/** Longest wait of a `write_stdin` poll (Codex's background terminal timeout). */
export const DEFAULT_MAX_BACKGROUND_TERMINAL_TIMEOUT_MS = 300_000;
/** `exec_command`'s wait when the call names none. */
export const DEFAULT_EXEC_YIELD_TIME_MS = 10_000;
/** `write_stdin`'s wait when the call names none. */
export const DEFAULT_WRITE_STDIN_YIELD_TIME_MS = 250;
/** Processes kept for `write_stdin` at most; past it one is pruned by Codex's rule. */
export const MAX_UNIFIED_EXEC_PROCESSES = 64;
/** From this many kept processes on, answers carry Codex's warning. */
export const WARNING_UNIFIED_EXEC_PROCESSES = 60;
/** After the exit, how long to wait for the output to close. */
const POST_EXIT_CLOSE_WAIT_MS = 50;
/** Pause after a write so the program can react before the poll. */
const WRITE_SETTLE_MS = 100;
const MIN_PROCESS_ID = 1_000;
const MAX_PROCESS_ID = 100_000;

/** Variables Codex pins for every unified-exec command (`UNIFIED_EXEC_ENV`). */
export const UNIFIED_EXEC_ENV: Readonly<Record<string, string>> = {
  NO_COLOR: '1',
  TERM: 'dumb',
  LANG: 'C.UTF-8',
  LC_CTYPE: 'C.UTF-8',
  LC_ALL: 'C.UTF-8',
  COLORTERM: '',
  PAGER: 'cat',
  GIT_PAGER: 'cat',
  GH_PAGER: 'cat',
  CODEX_CI: '1',
};

/** `v` held to [`lo`, `hi`]. */
export const clamp = (v: number, lo: number, hi: number): number => Math.min(Math.max(v, lo), hi);

/** `exec_command`: default 10 s, clamped to [250 ms, 30 s]. */
export function execYieldMs(requested: number | null | undefined): number {
  return clamp(requested ?? DEFAULT_EXEC_YIELD_TIME_MS, MIN_YIELD_TIME_MS, MAX_YIELD_TIME_MS);
}

/** `write_stdin`: at least 250 ms; a poll (empty chars) in [5 s, max(poll cap, 5 s)], a write at most 30 s. */
export function writeStdinYieldMs(
  requested: number | null | undefined,
  empty: boolean,
  maxPollMs = DEFAULT_MAX_BACKGROUND_TERMINAL_TIMEOUT_MS,
): number {
  const t = Math.max(requested ?? DEFAULT_WRITE_STDIN_YIELD_TIME_MS, MIN_YIELD_TIME_MS);
  return empty
    ? clamp(t, MIN_EMPTY_YIELD_TIME_MS, Math.max(maxPollMs, MIN_EMPTY_YIELD_TIME_MS))
    : Math.min(t, MAX_YIELD_TIME_MS);
}

/** Codex's warning text once `count` processes are kept (its wording, which models know). */
export function processLimitWarning(count: number): string {
  return `The maximum number of unified exec processes you can keep open is ${WARNING_UNIFIED_EXEC_PROCESSES} and you currently have ${count} processes open. Reuse older processes or close them to prevent automatic pruning of old processes`;
}

/** What the facade needs of the session that composes it (sessions/session.ts). */
export interface ExecHost {
  readonly processes: ProcessTable;
  readonly spec: { readonly policy: SessionPolicy };
  readonly backend: { readonly workdir: string; readonly environment: { readonly shell: { readonly path: string } } };
  /** Maps a client working directory onto the session (Session.resolveCwd). */
  resolveCwd(path: string): Promise<string>;
  /** Throws EXEC_ERR_SESSION_DEAD once the session lost its backend. */
  assertAlive(): void;
  touch(): void;
}

/** Codex's Debug names of approval policies, for its rejection text. */
function codexPolicyName(policy: SessionPolicy['approvalPolicy']): string {
  if (typeof policy !== 'string') return 'Granular';
  return { untrusted: 'UnlessTrusted', 'on-failure': 'OnFailure', 'on-request': 'OnRequest', never: 'Never' }[policy];
}

class ExecEntry {
  readonly id: number;
  readonly processId: ProcessId;
  readonly tty: boolean;
  readonly buffer = new HeadTailBuffer();
  readonly #decoder = new StringDecoder('utf8');
  lastUsed = Date.now();
  exit: { exitCode: number; sandboxDenied: boolean } | undefined;
  closed = false;
  #waiters: Array<() => void> = [];

  constructor(id: number, processId: ProcessId, tty: boolean) {
    this.id = id;
    this.processId = processId;
    this.tty = tty;
  }

  onEvent(event: LogEvent): void {
    if (event.kind === 'output') this.buffer.push(event.data);
    else if (event.kind === 'exited')
      this.exit = { exitCode: event.state.exitCode, sandboxDenied: event.sandboxDenied };
    else if (event.kind === 'closed') this.closed = true;
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w();
  }

  /** Resolves on the next event or after `ms`. */
  changed(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.#waiters = this.#waiters.filter((w) => w !== done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      this.#waiters.push(done);
    });
  }

  /** The output since the last drain, decoded (a split UTF-8 sequence waits for the next call). */
  drainText(): string {
    const text = this.#decoder.write(this.buffer.drain());
    return this.exit && this.closed ? text + this.#decoder.end() : text;
  }
}

/** A session's unified exec (`Session.unifiedExec`): `exec_command`, `write_stdin` and its HTTP approvals. */
export class UnifiedExec {
  readonly session: ExecHost;
  readonly approvals = new HttpApprovalQueue();
  /** Processes kept for `write_stdin` (alive after their first yield). */
  readonly #stored = new Map<number, ExecEntry>();
  /** Every tracked process, including calls still in their first yield. */
  readonly #byProcessId = new Map<ProcessId, ExecEntry>();
  readonly #reserved = new Set<number>();
  readonly #graceMs: number;

  /** Made by the session itself; `graceMs`: the server's `--terminate-grace-ms`, which pruning waits out. */
  constructor(session: ExecHost, graceMs: number) {
    this.session = session;
    this.#graceMs = graceMs;
    session.processes.subscribe((proc, event) => this.#byProcessId.get(proc.id)?.onEvent(event));
  }

  get storedCount(): number {
    return this.#stored.size;
  }

  #allocateId(): number {
    for (;;) {
      const id = randomInt(MIN_PROCESS_ID, MAX_PROCESS_ID);
      if (!this.#reserved.has(id)) {
        this.#reserved.add(id);
        return id;
      }
    }
  }

  #release(entry: ExecEntry): void {
    this.#stored.delete(entry.id);
    this.#byProcessId.delete(entry.processId);
    this.#reserved.delete(entry.id);
  }

  /** Codex's pruning rule (processes/pruning.ts) for the kept processes. */
  async #pruneIfNeeded(): Promise<void> {
    if (this.#stored.size < MAX_UNIFIED_EXEC_PROCESSES) return;
    const victim = pruneVictim([...this.#stored.values()], (e) => e.exit !== undefined);
    if (!victim) return;
    this.#release(victim);
    if (victim.exit) return;
    // Wait for the end so the session's process table can drop it too.
    await this.session.processes.terminate(victim.processId).catch(() => false);
    const deadline = Date.now() + this.#graceMs + 1000;
    while (!victim.exit && Date.now() < deadline) await victim.changed(deadline - Date.now());
  }

  async #resolveWorkdir(workdir: string | null | undefined): Promise<string | undefined> {
    if (workdir === undefined || workdir === null || workdir === '') return undefined;
    if (workdir.startsWith('/') || workdir.startsWith('file://'))
      return this.session.resolveCwd(toFieldPath(workdir, 'workdir'));
    return posix.join(this.session.backend.workdir, workdir);
  }

  /** Waits until the yield deadline (not counting time spent waiting for a person) or the exit. */
  async #collect(entry: ExecEntry, run: ToolRun, yieldMs: number, startedAt: number): Promise<void> {
    for (;;) {
      if (entry.exit) {
        if (!entry.closed) await entry.changed(POST_EXIT_CLOSE_WAIT_MS);
        return;
      }
      if (run.approvalPending) {
        await Promise.race([run.changed(), entry.changed(60_000)]);
        continue;
      }
      const left = startedAt + yieldMs + run.pausedMs - Date.now();
      if (left <= 0) return;
      await Promise.race([entry.changed(left), run.changed()]);
    }
  }

  #result(
    entry: ExecEntry,
    run: ToolRun,
    startedAt: number,
    maxOutputTokens: number | null | undefined,
    warning?: string,
  ): ExecToolResult {
    const rawOutput = entry.drainText();
    const wallTimeMs = Math.max(0, Date.now() - startedAt - run.pausedMs);
    if (entry.exit) {
      this.#release(entry);
      return buildResult({
        wallTimeMs,
        exitCode: entry.exit.exitCode,
        rawOutput,
        maxOutputTokens: maxOutputTokens ?? undefined,
        sandboxDenied: entry.exit.sandboxDenied,
      });
    }
    return buildResult({
      wallTimeMs,
      sessionId: entry.id,
      rawOutput,
      maxOutputTokens: maxOutputTokens ?? undefined,
      warning,
    });
  }

  #checkAlive(): void {
    this.session.assertAlive();
    this.session.touch();
  }

  async execCommand(args: ExecCommandArgs, run: ToolRun): Promise<ExecToolResult> {
    this.#checkAlive();
    const startedAt = Date.now();
    const session = this.session;
    const policy = session.spec.policy;
    const escalate = args.sandbox_permissions === 'require_escalated';
    if (
      escalate &&
      decideInitial({ policy, sandboxPermissions: 'require-escalated', preApproved: false, cachedForSession: false })
        .kind === 'reject'
    ) {
      const name = codexPolicyName(policy.approvalPolicy);
      throw execError(
        'EXEC_ERR_REJECTED',
        `approval policy is ${name}; reject command — you cannot ask for escalated permissions if the approval policy is ${name}`,
      );
    }
    const shell = args.shell || session.backend.environment.shell.path;
    const argv = [shell, args.login === false ? '-c' : '-lc', args.cmd];
    const cwd = await this.#resolveWorkdir(args.workdir);
    await this.#pruneIfNeeded();
    const id = this.#allocateId();
    const processId = asProcessId(`${id}-${randomUUID()}`);
    const tty = args.tty === true;
    const entry = new ExecEntry(id, processId, tty);
    this.#byProcessId.set(processId, entry);
    const disown = this.approvals.own(processId, run);
    try {
      try {
        await session.processes.start({
          processId,
          argv,
          cwd,
          env: UNIFIED_EXEC_ENV,
          mode: tty ? 'pty' : 'pipe-no-stdin',
          sandboxPermissions: escalate ? 'require-escalated' : 'use-default',
          justification: escalate ? (args.justification ?? undefined) : undefined,
        });
      } catch (err) {
        this.#release(entry);
        if ((err as { code?: string }).code === 'EXEC_ERR_REJECTED')
          throw execError('EXEC_ERR_REJECTED', 'exec command rejected by user', { cause: err });
        throw err;
      }
      await this.#collect(entry, run, execYieldMs(args.yield_time_ms), startedAt);
      if (entry.exit) return this.#result(entry, run, startedAt, args.max_output_tokens);
      this.#stored.set(id, entry);
      entry.lastUsed = Date.now();
      const count = this.#stored.size;
      return this.#result(
        entry,
        run,
        startedAt,
        args.max_output_tokens,
        count >= WARNING_UNIFIED_EXEC_PROCESSES ? processLimitWarning(count) : undefined,
      );
    } finally {
      disown();
    }
  }

  async writeStdin(args: WriteStdinArgs, run: ToolRun): Promise<ExecToolResult> {
    this.#checkAlive();
    const startedAt = Date.now();
    const entry = this.#stored.get(args.session_id);
    if (!entry) throw execError('EXEC_ERR_PROCESS_NOT_FOUND', `Unknown process id ${args.session_id}`);
    entry.lastUsed = Date.now();
    const chars = args.chars ?? '';
    if (chars !== '') {
      if (!entry.tty && chars !== '\u0003') {
        throw execError(
          'EXEC_ERR_INVALID_REQUEST',
          'stdin is closed for this session; rerun exec_command with tty=true to keep stdin open',
        );
      }
      if (!entry.exit) await this.session.processes.write(entry.processId, Buffer.from(chars, 'utf8'), undefined);
      await delay(WRITE_SETTLE_MS);
    }
    const disown = this.approvals.own(entry.processId, run);
    try {
      await this.#collect(entry, run, writeStdinYieldMs(args.yield_time_ms, chars === ''), startedAt);
    } finally {
      disown();
    }
    entry.lastUsed = Date.now();
    return this.#result(entry, run, startedAt, args.max_output_tokens);
  }

  /** Ends every kept process (Codex's CleanBackgroundTerminals). */
  async terminateAll(): Promise<number> {
    const entries = [...this.#stored.values()];
    for (const e of entries) this.#release(e);
    await Promise.all(entries.map((e) => this.session.processes.terminate(e.processId).catch(() => false)));
    return entries.length;
  }
}
