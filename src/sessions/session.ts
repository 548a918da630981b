/**
 * One session: its backend session (workspace or container), its process table, its policy,
 * its file operations, its unified-exec facade, and the client currently attached to it (at
 * most one; a resume evicts the previous one). Everything per session is made here, with the
 * options of the server's configuration, and ends with `destroy()`.
 */
import type { BackendHibernation, BackendSession } from '../backends/types.ts';
import type { SessionId, TenantId } from '../ids.ts';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import { type ApprovalRequest, SessionApprovals } from '../policy/approvals.ts';
import {
  answeredOutcome,
  type ApprovalOutcome,
  pendingLimitRefusal,
  unansweredRefusal,
} from '../policy/approval-gate.ts';
import { execError } from '../errors.ts';
import { SessionPorts, type PortLimits } from './ports.ts';
import { ProcessTable, type ProcessLimits } from '../processes/process-table.ts';
import type { HibernationAnswer, SessionInfo, SnapshotInfo } from '../protocol/index.ts';
import { UnifiedExec } from '../tools/unified-exec.ts';
import type { FileLimits } from './files/file-limits.ts';
import { SessionFiles } from './files/session-files.ts';
import { DiskWatch, type MeasureSlots } from './disk-watch.ts';
import { UsageSampler } from './resource-usage.ts';
import { sessionRecord, type ResolvedSessionSpec } from './session-spec.ts';
import type { AuditEvent, Auditor } from '../audit/auditor.ts';
import { WorkspaceAliases } from './workspace-aliases.ts';
import type { FilesSession, SessionStatus } from './session-view.ts';
import { TokenRevocations } from './token-revocations.ts';
import { SessionEgress, withEgressEnvironment } from '../egress/session-egress.ts';

/** The client side of a session: a WebSocket connection, or the HTTP approval queue. */
export interface SessionClient {
  readonly clientName: string;
  /** Sends a server-to-client request; rejects on timeout or disconnect. */
  request(method: string, params: unknown, timeoutMs: number): Promise<unknown>;
  /** Closes the client because another connection resumed the session. */
  evict(reason: string): void;
}

export type { SessionStatus } from './session-view.ts';

/** Observing connections (`initialize observe`, read tokens) one session serves at most: each has its own output buffer. */
export const MAX_OBSERVERS_PER_SESSION = 32;

export interface SessionDeps {
  readonly metrics: Metrics;
  readonly log: Logger;
  readonly limits: ProcessLimits;
  readonly approvalTimeoutMs: number;
  readonly maxPendingApprovals: number;
  readonly backendKind: string;
  readonly fileLimits: FileLimits;
  readonly portLimits: PortLimits;
  /** Between two measurements of the disk watch (where the engine does not enforce the limit). */
  readonly diskWatchMs: number;
  /** Disk measurements in flight across the server's sessions. */
  readonly diskSlots: MeasureSlots;
  /** The sandbox types a tenant may ask for (`--allowed-sandbox-types`); absent: all. */
  readonly sandboxTypes?: ((tenant: string) => readonly string[]) | undefined;
  /** The audit log (`--audit-log`), or one that records nothing. */
  readonly audit: Auditor;
}

/**
 * How often at most a used session tells its backend so (`BackendSession.noteActivity`). A
 * server that re-adopts the session counts its idle time from the last note plus this, so the
 * session is never taken for idle sooner than it is; at most this much later.
 */
export const NOTE_ACTIVITY_MS = 5_000;

/** One session: composes its backend session, processes, files, unified exec, ports, egress and tokens. */
export class Session implements FilesSession {
  readonly id: SessionId;
  readonly tenant: TenantId;
  readonly spec: ResolvedSessionSpec;
  readonly backend: BackendSession;
  readonly processes: ProcessTable;
  /** Sandbox-checked file operations (`fs/*`, `/v1/sessions/:id/files`). */
  readonly files: SessionFiles;
  /** Codex's unified exec over HTTP (`exec_command`, `write_stdin`, tool calls); its approval queue answers when no client is attached. */
  readonly unifiedExec: UnifiedExec;
  /** Live resource use (`session/info`, `GET /v1/sessions/:id`). */
  readonly usage: UsageSampler;
  /** The disk limit where the server enforces it (disk-watch.ts). */
  readonly disk: DiskWatch;
  /** Exposed preview ports and the proxied connections to them. */
  readonly ports: SessionPorts;
  /** The egress proxy of a session created with `network.allow` (src/egress/). */
  readonly egress: SessionEgress | undefined;
  readonly createdAt: Date;
  /** Approved for the session, bounded; recorded before the command runs (a failed store: asked again). */
  readonly approvalCache = new SessionApprovals(() =>
    this.persistRecord().catch((err: unknown) => this.#log.warn({ err }, 'approval not in the session record')),
  );
  /** Session tokens revoked before their expiry; stored with the session's record. */
  readonly tokens = new TokenRevocations();
  /** Client paths that stand for the workspace (workspace-aliases.ts). */
  readonly #aliases: WorkspaceAliases;
  lastActivity = Date.now();
  /** When `touch` last told the backend (NOTE_ACTIVITY_MS). */
  #notedAt = 0;
  status: SessionStatus = { status: 'alive' };
  #client: SessionClient | undefined;
  #pendingApprovals = 0;
  /** Cleanups run by `destroy()` (an observing connection closes itself). */
  readonly #onDestroy = new Set<() => void>();
  #observers = 0;
  readonly #deps: SessionDeps;
  /** The last record write asked for (persistRecord). */
  #recordWrite: Promise<void> = Promise.resolve();
  readonly #log: Logger;

  constructor(
    id: SessionId,
    tenant: TenantId,
    spec: ResolvedSessionSpec,
    backend: BackendSession,
    deps: SessionDeps,
    createdAt = new Date(),
  ) {
    this.id = id;
    this.tenant = tenant;
    this.spec = spec;
    this.backend = backend;
    this.createdAt = createdAt;
    this.#deps = deps;
    this.#log = deps.log.child({ sessionId: id });
    this.#aliases = new WorkspaceAliases(backend, this.#log);
    this.egress = SessionEgress.of(spec.network, deps.metrics, (event) => this.audit(event), this.#log);
    this.processes = new ProcessTable(
      {
        backend,
        policy: spec.policy,
        requestApproval: (req) => this.requestApproval(req),
        approvalCache: this.approvalCache,
        metrics: deps.metrics,
        log: this.#log,
        admit: () => this.disk.admit(),
        sandboxTypes: deps.sandboxTypes?.(tenant),
        audit: (action, detail, actor) => this.audit({ action, detail, actor }),
      },
      deps.limits,
      backend.environment.baseEnv,
      withEgressEnvironment(this.egress, spec.env),
    );
    this.files = new SessionFiles(this, deps.fileLimits);
    this.unifiedExec = new UnifiedExec(this, deps.limits.terminateGraceMs);
    this.usage = new UsageSampler(this);
    this.disk = new DiskWatch(this, {
      intervalMs: deps.diskWatchMs,
      slots: deps.diskSlots,
      log: this.#log,
      metrics: deps.metrics,
      backendKind: deps.backendKind,
    });
    this.disk.start();
    this.ports = new SessionPorts(this, deps.portLimits);
    backend.onLost((reason) => this.markDead(reason));
  }

  /** Records an audit event of this session (its tenant and id filled in). */
  audit(event: AuditEvent): void {
    if (this.#deps.audit.enabled) this.#deps.audit.record({ tenant: this.tenant, session: this.id, ...event });
  }

  /**
   * Stores the session's record (its policy, the session tokens it revoked, its exposed preview
   * ports, the commands approved for it) where a restarted server's recovery reads it back; resolves once stored.
   */
  persistRecord(): Promise<void> {
    // One write at a time, each of the state when it starts: writes that overlapped raced on
    // the backend's temporary file (a port exposed right after the create failed with 502), and
    // an older record could land last. Each caller waits for its own write and sees its error.
    const write = this.#recordWrite.catch(() => undefined).then(() => this.backend.persistRecord(this.#record()));
    this.#recordWrite = write;
    return write;
  }

  #record(): string {
    return sessionRecord(this.spec, this.tokens.entries(), this.ports.list(), this.approvalCache.entries());
  }

  /** Throws `EXEC_ERR_SESSION_DEAD` once the session lost its backend. */
  assertAlive(): void {
    if (this.status.status === 'dead')
      throw execError('EXEC_ERR_SESSION_DEAD', `session is dead: ${this.status.reason}`);
  }

  /**
   * Where a path the client names lives in this session: Codex sends its own local working
   * directory, and aliases map such paths onto the workspace (workspace-aliases.ts).
   */
  mapClientPath(path: string): string {
    return this.#aliases.map(path);
  }

  /** Maps a working directory the client names (a start's `cwd`), making an alias where needed. */
  resolveCwd(path: string): Promise<string> {
    return this.#aliases.resolveCwd(path);
  }

  /** Whether commands started in `cwd` run in a linked alias of the workspace (their `PWD` should say so). */
  isLinkedAlias(cwd: string): boolean {
    return this.#aliases.isLinked(cwd);
  }

  /** Client paths that stand for the workspace. */
  get workspaceAliases(): readonly string[] {
    return this.#aliases.paths;
  }

  get client(): SessionClient | undefined {
    return this.#client;
  }

  get expiresAt(): Date {
    return new Date(this.createdAt.getTime() + this.spec.maxLifetimeSeconds * 1000);
  }

  /** Attaches `client`, evicting the previous one (docs/protocol.md: a resume closes the older connection). */
  attach(client: SessionClient): void {
    const previous = this.#client;
    this.#client = client;
    this.touch();
    if (previous && previous !== client) previous.evict('session has been resumed by another connection');
  }

  detach(client: SessionClient): void {
    if (this.#client === client) this.#client = undefined;
    this.touch();
  }

  touch(): void {
    const now = Date.now();
    this.lastActivity = now;
    if (now - this.#notedAt < NOTE_ACTIVITY_MS) return;
    this.#notedAt = now;
    this.backend.noteActivity?.();
  }

  /**
   * The idle clock of a re-adopted session goes on from when its previous server last noted it
   * used (`at`), not from now; never later than now.
   */
  restoreActivity(at: number): void {
    this.lastActivity = Math.min(Date.now(), at + NOTE_ACTIVITY_MS);
  }

  markDead(reason: string): void {
    if (this.status.status === 'dead') return;
    this.status = { status: 'dead', reason };
    this.processes.markAllLost(reason);
    this.#log.warn({ reason }, 'session lost its backend');
  }

  /**
   * Asks the attached client, else the HTTP approval queue (which only queues for a process an
   * HTTP tool call runs); fails closed (denied) on no one to ask, disconnect, timeout, overflow
   * or a malformed answer.
   */
  async requestApproval(req: ApprovalRequest): Promise<ApprovalOutcome> {
    const client = this.#client ?? this.unifiedExec.approvals;
    if (this.#pendingApprovals >= this.#deps.maxPendingApprovals) {
      this.#log.warn({ processId: req.processId }, 'too many pending approvals: denied');
      return pendingLimitRefusal(this.#deps.maxPendingApprovals);
    }
    this.#pendingApprovals++;
    try {
      const answer = await client.request('approval/request', req, this.#deps.approvalTimeoutMs);
      return answeredOutcome(answer);
    } catch (err) {
      this.#log.info({ processId: req.processId, err: (err as Error).message }, 'approval not answered: denied');
      return unansweredRefusal(err);
    } finally {
      this.#pendingApprovals--;
    }
  }

  info(): SessionInfo {
    return {
      sessionId: this.id,
      tenant: this.tenant,
      backend: this.#deps.backendKind,
      sandboxType: this.spec.policy.sandbox.type === 'danger-full-access' ? 'none' : this.backend.sandboxType,
      sandboxUnavailableReason: this.backend.sandboxUnavailableReason,
      sandbox: this.spec.policy.sandbox,
      approvalPolicy: this.spec.policy.approvalPolicy,
      denialHandling: this.spec.policy.denialHandling,
      image: this.backend.image,
      containerId: this.backend.containerId,
      execPath: this.backend.execPath,
      execPathReason: this.backend.execPathReason,
      agentTransport: this.backend.agentTransport,
      runtime: this.backend.runtime,
      hibernation: this.backend.hibernation?.state,
      hibernatedAt: this.backend.hibernation?.hibernatedAt?.toISOString(),
      workdir: this.backend.workdir,
      status: this.status.status,
      attached: this.#client !== undefined,
      processes: this.processes.size,
      runningProcesses: this.processes.runningCount,
      labels: this.spec.labels,
      createdAt: this.createdAt.toISOString(),
      expiresAt: this.expiresAt.toISOString(),
      ports: this.ports.list(),
      ...this.disk.info(),
      egress: this.egress?.info(),
    };
  }

  /** Checkpoints and stops the session's container (`session/hibernate`); see docs/docker-backend.md. */
  async hibernate(): Promise<HibernationAnswer> {
    const h = this.#hibernation();
    await h.hibernate();
    this.audit({ action: 'session.hibernate' });
    return { sessionId: this.id, hibernation: h.state, hibernatedAt: h.hibernatedAt?.toISOString() };
  }

  /** Restores a hibernated session (`session/wake`); nothing to do when it is awake. */
  async wake(): Promise<HibernationAnswer> {
    const h = this.#hibernation();
    await h.wake();
    this.touch();
    this.audit({ action: 'session.wake' });
    return { sessionId: this.id, hibernation: h.state };
  }

  /** Commits the session's filesystem (with `memory`, also its memory) to a snapshot image (docker backend). */
  async snapshot(name: string | undefined, memory = false): Promise<SnapshotInfo> {
    this.assertAlive();
    const snapshot = await this.backend.snapshot(name, memory ? { memory } : undefined);
    this.audit({
      action: 'session.snapshot',
      detail: { snapshot: snapshot.snapshotId, name: name ?? null, memory, pauseMs: snapshot.pauseMs ?? null },
    });
    return snapshot;
  }

  #hibernation(): BackendHibernation {
    this.assertAlive();
    const h = this.backend.hibernation;
    if (h === undefined)
      throw execError(
        'EXEC_ERR_UNSUPPORTED',
        `hibernation needs the docker backend; this session runs on the ${this.#deps.backendKind} backend`,
      );
    return h;
  }

  /**
   * Ends every process: the tracked ones (with the terminate grace), then whatever the backend
   * still runs for the session (background processes, ones that left their process group).
   * Returns how many tracked processes were running.
   */
  async terminateAll(): Promise<number> {
    const terminated = await this.processes.terminateAll();
    if (this.backend.killAll) {
      // The tracked ones first get their grace (SIGTERM, then SIGKILL); then the rest goes.
      const deadline = Date.now() + this.#deps.limits.terminateGraceMs + 1000;
      while (this.processes.runningCount > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      await this.backend.killAll();
    }
    return terminated;
  }

  /** Counts one more observer; throws `EXEC_ERR_BUSY` past the limit. Returns its release (call it once). */
  addObserver(): () => void {
    if (this.#observers >= MAX_OBSERVERS_PER_SESSION)
      throw execError(
        'EXEC_ERR_BUSY',
        `too many observers of this session (limit ${MAX_OBSERVERS_PER_SESSION}); close one first`,
        { detail: { limit: MAX_OBSERVERS_PER_SESSION } },
      );
    this.#observers++;
    return () => void this.#observers--;
  }

  /** Registers a cleanup run when the session is destroyed; returns its removal. */
  onDestroy(cleanup: () => void): () => void {
    this.#onDestroy.add(cleanup);
    return () => this.#onDestroy.delete(cleanup);
  }

  async destroy(): Promise<void> {
    this.disk.stop();
    for (const cleanup of this.#onDestroy) cleanup();
    this.#onDestroy.clear();
    this.ports.closeAll();
    this.files.close();
    this.unifiedExec.approvals.close();
    this.#client?.evict('session was deleted');
    this.#client = undefined;
    await this.processes.close();
    await this.backend.destroy();
  }
}
