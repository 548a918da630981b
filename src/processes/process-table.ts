/**
 * The processes of one session: start through the policy gate, read/write/signal/terminate,
 * the per-session limit with Codex's pruning rule, and retention of ended processes.
 */
import { checkArgLengths } from './exec-limits.ts';
import { currentActor, type AuditActor } from '../audit/auditor.ts';
import type { SignalName, SpawnMode, TerminalSize } from '../backends/types.ts';
import { execError } from '../errors.ts';
import type { ProcessSummary, WriteStatus } from '../protocol/index.ts';
import type { ProcessId } from '../ids.ts';
import type { SandboxPermissions } from '../policy/approval-gate.ts';
import type { SandboxNarrowing } from '../policy/sandbox-policy.ts';
import { buildEnvironment, type EnvPolicy } from './environment.ts';
import { launch, type LauncherContext } from './launcher.ts';
import { ManagedProcess } from './managed-process.ts';
import type { LogEvent, ReadResult } from './output-log.ts';
import { pruneVictim } from './pruning.ts';
import { decodeRecoveryTag, encodeRecoveryTag } from './recovery.ts';
import type { BackendProcess, ProcessSink, RecoveredProcess } from '../backends/types.ts';
const DEFAULT_SIZE: TerminalSize = { cols: 80, rows: 24 };

/** A session's bounds on its processes: how many, how much output each retains, how long ended ones stay. */
export interface ProcessLimits {
  readonly maxProcesses: number;
  readonly retentionBytes: number;
  readonly exitedRetentionMs: number;
  readonly terminateGraceMs: number;
}

/** A start as the engine sees it: decoded and validated at the edge. */
export interface StartRequest {
  readonly processId: ProcessId;
  readonly argv: readonly string[];
  readonly cwd?: string | undefined;
  readonly env?: Readonly<Record<string, string>> | undefined;
  readonly envPolicy?: EnvPolicy | undefined;
  readonly mode: SpawnMode;
  readonly arg0?: string | undefined;
  readonly size?: TerminalSize | undefined;
  readonly timeoutMs?: number | undefined;
  readonly sandboxPermissions?: SandboxPermissions | undefined;
  /** Why the caller asks for `require-escalated`: shown to whoever approves it. */
  readonly justification?: string | undefined;
  readonly approval?: 'approved' | 'approved-for-session' | undefined;
  readonly narrowing?: SandboxNarrowing | undefined;
}

/** A `process/read`: after which seq, how much, and how long to wait for output. */
export interface ReadRequest {
  readonly afterSeq: number;
  readonly maxBytes: number;
  readonly waitMs: number;
  readonly signal?: AbortSignal | undefined;
}

/** A session's processes: starts them through the launcher, reads, signals, prunes, and tells listeners. */
export class ProcessTable {
  readonly #procs = new Map<ProcessId, ManagedProcess>();
  readonly #ctx: LauncherContext;
  readonly #limits: ProcessLimits;
  readonly #baseEnv: Readonly<Record<string, string>>;
  readonly #sessionEnv: Readonly<Record<string, string>>;
  readonly #listeners = new Set<(proc: ManagedProcess, event: LogEvent) => void>();
  #closed = false;
  #outputPaused = false;
  /** Who started each process, for its exit's audit line (the exit itself has no caller). */
  readonly #starters = new WeakMap<ManagedProcess, AuditActor>();
  /**
   * True while a restarted server re-adopts this session's processes: the exits the backend
   * reports then happened under the previous server (which audited them if it saw them), so
   * they are not audited again.
   */
  adopting = false;

  /** `baseEnv`: what `envPolicy.inherit` inherits; `sessionEnv`: the session's own variables, under each start's `env`. */
  constructor(
    ctx: LauncherContext,
    limits: ProcessLimits,
    baseEnv: Readonly<Record<string, string>>,
    sessionEnv: Readonly<Record<string, string>>,
  ) {
    this.#ctx = ctx;
    this.#limits = limits;
    this.#baseEnv = baseEnv;
    this.#sessionEnv = sessionEnv;
  }

  get size(): number {
    return this.#procs.size;
  }

  get runningCount(): number {
    let n = 0;
    for (const p of this.#procs.values()) if (!p.ended) n++;
    return n;
  }

  /** Every event of every process, for the attached connection's notifications. */
  subscribe(listener: (proc: ManagedProcess, event: LogEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  get(id: ProcessId): ManagedProcess {
    const proc = this.#procs.get(id);
    if (!proc) throw execError('EXEC_ERR_PROCESS_NOT_FOUND', `unknown process id ${id}`);
    return proc;
  }

  find(id: ProcessId): ManagedProcess | undefined {
    return this.#procs.get(id);
  }

  async start(req: StartRequest): Promise<ManagedProcess> {
    await this.#ctx.admit?.();
    if (this.#closed) throw execError('EXEC_ERR_SESSION_DEAD', 'session is closed');
    if (this.#procs.has(req.processId))
      throw execError('EXEC_ERR_PROCESS_EXISTS', `process ${req.processId} already exists`);
    this.#pruneIfNeeded();
    const cwd = req.cwd ?? this.#ctx.backend.workdir;
    const proc = this.#register(
      new ManagedProcess(
        { id: req.processId, argv: req.argv, cwd, mode: req.mode, timeoutMs: req.timeoutMs },
        this.#limits.retentionBytes,
        (p) => this.#onTerminal(p),
      ),
    );
    if (this.#outputPaused) proc.setOutputPaused(true);
    const starter = currentActor();
    if (starter !== undefined) this.#starters.set(proc, starter);
    const env = buildEnvironment(this.#baseEnv, req.envPolicy, { ...this.#sessionEnv, ...req.env });
    try {
      checkArgLengths(req.argv, env);
      await launch(this.#ctx, proc, {
        sandboxPermissions: req.sandboxPermissions ?? 'use-default',
        justification: req.justification,
        approval: req.approval,
        narrowing: req.narrowing,
        spawn: { argv: req.argv, arg0: req.arg0, cwd, env, mode: req.mode, size: req.size ?? DEFAULT_SIZE },
        requestedEnv: req.env,
        recoveryTag: (seqBase, sandboxed) =>
          encodeRecoveryTag({
            processId: req.processId,
            argv: req.argv,
            cwd,
            mode: req.mode,
            createdAt: proc.createdAt,
            timeoutAt: req.timeoutMs === undefined ? undefined : proc.createdAt + req.timeoutMs,
            seqBase,
            sandboxed,
          }),
      });
    } catch (err) {
      this.#procs.delete(req.processId);
      proc.clearTimers();
      throw err;
    }
    if (req.timeoutMs !== undefined) {
      proc.addTimer(
        () => void proc.end('timed-out', this.#limits.terminateGraceMs).catch(() => undefined),
        req.timeoutMs,
      );
    }
    return proc;
  }

  #register(proc: ManagedProcess): ManagedProcess {
    proc.log.subscribe((event) => {
      if (event.kind === 'output') this.#ctx.metrics.streamBytes.inc({ stream: event.stream }, event.data.length);
      for (const listener of this.#listeners) listener(proc, event);
    });
    this.#procs.set(proc.id, proc);
    return proc;
  }

  /**
   * Recovery: a process a previous server started, which the backend kept. Returns the sink
   * the backend reports to from now on; undefined (let it go) for a tag this server cannot read
   * or an id already taken.
   */
  adopt(kept: RecoveredProcess, process: BackendProcess): ProcessSink | undefined {
    const tag = decodeRecoveryTag(kept.tag);
    if (!tag || this.#procs.has(tag.processId) || this.#closed) return undefined;
    const proc = new ManagedProcess(
      { id: tag.processId, argv: tag.argv, cwd: tag.cwd, mode: tag.mode },
      this.#limits.retentionBytes,
      (p) => this.#onTerminal(p),
      tag.createdAt,
    );
    const sink = proc.adopt(
      {
        seqBase: kept.seqsUnknown === true ? seqPastUnknown(tag.seqBase, tag.createdAt) : tag.seqBase,
        droppedBytes: kept.droppedBytes,
        endOffset: kept.endOffset,
        sandboxType: kept.sandboxType,
        chunks: kept.chunks,
      },
      process,
    );
    this.#register(proc);
    if (this.#outputPaused) proc.setOutputPaused(true);
    if (tag.timeoutAt !== undefined) {
      proc.addTimer(
        () => void proc.end('timed-out', this.#limits.terminateGraceMs).catch(() => undefined),
        Math.max(0, tag.timeoutAt - Date.now()),
      );
    }
    return sink;
  }

  /** Long-poll read (Codex `process/read`). */
  async read(id: ProcessId, req: ReadRequest): Promise<{ proc: ManagedProcess; result: ReadResult }> {
    const proc = this.get(id);
    proc.touch();
    await proc.log.waitFor(req.afterSeq, req.waitMs, req.signal);
    return { proc, result: proc.log.read(req.afterSeq, req.maxBytes) };
  }

  async write(id: ProcessId, chunk: Buffer, writeId: string | undefined): Promise<WriteStatus> {
    const proc = this.#procs.get(id);
    if (!proc) return 'unknownProcess';
    const { status, stdinBytes } = await proc.write(chunk, writeId);
    if (stdinBytes > 0) this.#ctx.metrics.streamBytes.inc({ stream: 'stdin' }, stdinBytes);
    if (stdinBytes > 0) this.#ctx.audit?.('process.stdin', { processId: id, bytes: stdinBytes });
    return status;
  }

  async closeStdin(id: ProcessId): Promise<void> {
    await this.get(id).closeStdin();
  }

  async resize(id: ProcessId, size: TerminalSize): Promise<void> {
    const proc = this.get(id);
    if (proc.spec.mode !== 'pty')
      throw execError('EXEC_ERR_INVALID_REQUEST', `process ${id} has no terminal (started without tty)`);
    await proc.resize(size);
  }

  async signal(id: ProcessId, signal: SignalName): Promise<void> {
    const proc = this.get(id);
    proc.touch();
    if (proc.state.status === 'starting') throw execError('EXEC_ERR_PROCESS_STARTING', `process id ${id} is starting`);
    if (!proc.ended) await proc.signal(signal);
  }

  /** `{running}`: true if a running process was told to end. */
  async terminate(id: ProcessId): Promise<boolean> {
    const proc = this.#procs.get(id);
    if (proc?.state.status !== 'running') return false;
    proc.touch();
    await proc.end('terminated', this.#limits.terminateGraceMs);
    return true;
  }

  async terminateAll(): Promise<number> {
    const running = [...this.#procs.values()].filter((p) => p.state.status === 'running');
    await Promise.all(running.map((p) => p.end('terminated', this.#limits.terminateGraceMs).catch(() => undefined)));
    return running.length;
  }

  list(): ProcessSummary[] {
    return [...this.#procs.values()].map((p) => ({
      processId: p.id,
      argv: [...p.spec.argv],
      mode: p.spec.mode,
      status: p.state.status,
      exitCode: 'exitCode' in p.state ? p.state.exitCode : null,
      sandboxType: p.sandboxType,
      nextSeq: p.log.nextSeq,
      createdAtMs: p.createdAt,
      endedAtMs: p.endedAt ?? null,
      sandboxDenied: p.sandboxDenied,
    }));
  }

  /**
   * Flow control for the attached client: while it is behind, the backends stop reading output
   * (commands block on a full pipe, as under a terminal) instead of the server buffering without
   * bound. Never paused without an attached client: then output is always drained.
   */
  setOutputPaused(paused: boolean): void {
    if (this.#outputPaused === paused) return;
    this.#outputPaused = paused;
    for (const p of this.#procs.values()) if (!p.ended) p.setOutputPaused(paused);
  }

  /** Ends every process whose backend is gone (container lost). */
  markAllLost(reason: string): void {
    for (const p of this.#procs.values()) if (!p.ended) p.fail(reason);
  }

  /** Kills everything (session destroyed): SIGKILL, no grace. */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(
      [...this.#procs.values()].filter((p) => !p.ended).map((p) => p.signal('SIGKILL').catch(() => undefined)),
    );
  }

  #onTerminal(proc: ManagedProcess): void {
    this.#ctx.metrics.processExits.inc({ terminal: proc.state.status });
    const state = proc.state as { status: string; exitCode?: number; signal?: string; reason?: string };
    if (!this.adopting)
      this.#ctx.audit?.(
        'process.exit',
        {
          processId: proc.id,
          status: state.status,
          exitCode: state.exitCode ?? null,
          signal: state.signal ?? null,
          durationMs: Date.now() - proc.createdAt,
        },
        this.#starters.get(proc) ?? { principal: 'system' },
      );
    if (proc.state.status === 'lost')
      this.#ctx.log.info({ processId: proc.id, reason: proc.state.reason }, 'process lost');
    proc.addTimer(() => {
      if (this.#procs.get(proc.id) !== proc) return;
      this.#procs.delete(proc.id);
      proc.dispose();
    }, this.#limits.exitedRetentionMs);
  }

  /** Codex's pruning rule (pruning.ts), for the per-session process limit. */
  #pruneIfNeeded(): void {
    while (this.#procs.size >= this.#limits.maxProcesses) {
      const victim = pruneVictim(
        [...this.#procs.values()],
        (p) => p.ended,
        (p) => p.state.status === 'running',
      );
      if (!victim)
        throw execError(
          'EXEC_ERR_PROCESS_LIMIT',
          `session has ${this.#procs.size} processes (limit ${this.#limits.maxProcesses}) and none can be pruned`,
        );
      this.#procs.delete(victim.id);
      victim.clearTimers();
      victim.dispose();
      if (!victim.ended) void victim.end('terminated', 0).catch(() => undefined);
      this.#ctx.log.info({ processId: victim.id }, 'pruned process to stay under the per-session limit');
    }
  }
}

/**
 * A seq past every one the previous server can have given a process whose published seqs are
 * unknown: it numbered at most one event per microsecond of the process's life (each is at
 * least one read from the backend), so a client resuming from its last seq still hears the end.
 */
function seqPastUnknown(seqBase: number, createdAt: number): number {
  return seqBase + Math.max(0, Date.now() - createdAt) * 1000 + 1;
}
