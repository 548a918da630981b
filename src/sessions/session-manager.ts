/**
 * Creates, finds, reaps and destroys sessions; enforces ownership (another tenant's session
 * does not exist for you) and the server and per-tenant quotas.
 */
import { randomUUID } from 'node:crypto';
import { resolveSandbox } from '../policy/sandbox-policy.ts';
import type { Backend, BackendSession, BackendSessionSpec } from '../backends/types.ts';
import { allowedSandboxTypes, hostDirsFor, sandboxTypeRules, type Config } from '../config.ts';
import { execError, toExecError } from '../errors.ts';
import { asSessionId, type SessionId, type TenantId } from '../ids.ts';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import { DEFAULT_FILE_LIMITS } from './files/file-limits.ts';
import { checkSandboxType, resolveSessionSpec, type ResolvedSessionSpec, type SessionSpec } from './session-spec.ts';
import { NO_AUDIT, redactEnv, type Auditor } from '../audit/auditor.ts';
import { MeasureSlots } from './disk-watch.ts';
import { FleetRouter, type SessionRoute } from './fleet-router.ts';
import { type ForkResult, forkSession } from './session-fork.ts';
import { checkLimits, Reservations } from './session-limits.ts';
import { startEgress } from '../egress/session-egress.ts';
import { Session, type SessionDeps } from './session.ts';
import { createBatch } from './batch-create.ts';
import { type AdoptionHost, adoptRecovered, adoptRestored } from './session-adoption.ts';
import { type ReapHost, reapSessions } from './session-reaper.ts';
import { removeSession } from './session-removal.ts';

const REAP_INTERVAL_MS = 5_000;

/** Disk measurements (a `du`, an engine walk of a layer) in flight at once across all sessions. */
const DISK_MEASUREMENTS = 4;

/** Who creates a session and how its image pull is reported. */
export interface CreateOptions {
  readonly tenant: TenantId;
  /** Who opens it: `codex…` clients get denial reports by default (`--denial-handling auto`). */
  readonly clientName?: string | undefined;
  /** Progress of an image pull the creation waits for (`session/imagePull` to the asking connection). */
  readonly onImagePull?: BackendSessionSpec['onImagePull'];
}

export type { SessionRoute } from './fleet-router.ts';

/** The server's sessions: create, find and route, quotas, reaping, recovery and removal. */
export class SessionManager {
  readonly #sessions = new Map<SessionId, Session>();
  readonly #backend: Backend;
  readonly #config: Config;
  readonly #metrics: Metrics;
  readonly #log: Logger;
  readonly #deps: SessionDeps;
  /** Places held by creations under way (session-limits.ts). */
  readonly #reserved = new Reservations();
  /** Where a session of a fleet is served, and the take-over of orphans (fleet-router.ts). */
  readonly #router: FleetRouter;
  #reaper: NodeJS.Timeout | undefined;
  #closing = false;
  /** What re-adopting a kept session needs (session-adoption.ts). */
  readonly #adoption: AdoptionHost;
  /** What the reaper needs (session-reaper.ts). */
  readonly #reapHost: ReapHost;

  constructor(backend: Backend, config: Config, metrics: Metrics, log: Logger, audit: Auditor = NO_AUDIT) {
    this.#backend = backend;
    this.#config = config;
    this.#metrics = metrics;
    this.#log = log;
    this.#router = new FleetRouter({
      fleet: backend.fleet,
      local: (id) => this.#sessions.get(id as SessionId),
      closing: () => this.#closing,
      adopt: async (id, tenant) => {
        const recovered = await backend.fleet?.takeOver(id, tenant);
        const session = recovered === undefined ? undefined : await adoptRecovered(recovered, this.#adoption);
        this.#metrics.sessionsActive.set(this.#sessions.size);
        return session;
      },
    });
    const sessions = this.#sessions;
    const sandboxRules = sandboxTypeRules(config.allowedSandboxTypes);
    metrics.watchEgress(function* (this: void) {
      for (const s of sessions.values()) if (s.egress !== undefined) yield { id: s.id, counts: s.egress.counts };
    });
    this.#deps = {
      sandboxTypes: (tenant) => allowedSandboxTypes(sandboxRules, tenant),
      metrics,
      log,
      backendKind: backend.kind,
      approvalTimeoutMs: config.approvalTimeoutMs,
      maxPendingApprovals: config.maxPendingApprovals,
      fileLimits: { ...DEFAULT_FILE_LIMITS, maxReadBytes: config.fsMaxReadBytes },
      portLimits: { maxPorts: config.previewMaxPorts, maxConnections: config.previewMaxConnections },
      diskWatchMs: config.diskWatchSeconds * 1000,
      diskSlots: new MeasureSlots(DISK_MEASUREMENTS),
      audit,
      limits: {
        maxProcesses: config.maxProcesses,
        retentionBytes: config.outputRetentionBytes,
        exitedRetentionMs: config.exitedRetentionMs,
        terminateGraceMs: config.terminateGraceMs,
      },
    };
    this.#adoption = {
      config,
      deps: this.#deps,
      log,
      register: (session) => this.#sessions.set(session.id, session),
      discard: (backend) => this.#discard(backend),
    };
    this.#reapHost = {
      hibernateAfterMs: config.idleHibernateSeconds * 1000,
      exitedRetentionMs: config.exitedRetentionMs,
      log,
      remove: (session, why) => this.#remove(session, why),
    };
  }

  get backend(): Backend {
    return this.#backend;
  }

  /** The audit log the sessions record to (connections record their refusals there too). */
  get audit(): Auditor {
    return this.#deps.audit;
  }

  /** Re-adopts sessions the backend kept (docker containers of this instance) and starts reaping. */
  async start(): Promise<void> {
    for (const recovered of await this.#backend.recover()) await adoptRecovered(recovered, this.#adoption);
    this.#metrics.sessionsActive.set(this.#sessions.size);
    this.#reaper = setInterval(() => void this.reap(), REAP_INTERVAL_MS);
    this.#reaper.unref();
    this.#router.startScan();
  }

  /** Where session `id` of `tenant` is served (fleet-router.ts): here, at another replica, or nowhere. */
  route(id: string, tenant: TenantId): Promise<SessionRoute> {
    return this.#router.route(id, tenant);
  }

  /** After the replica at `url` did not answer: routes again once its lease ends (fleet-router.ts). */
  rerouteAfterFailure(id: string, tenant: TenantId, url: string): Promise<SessionRoute> {
    return this.#router.rerouteAfterFailure(id, tenant, url);
  }

  /** Sessions of `tenant` across the fleet: ids from the engine's labels (undefined without a fleet). */
  async fleetSessions(tenant: TenantId): Promise<readonly { id: SessionId }[] | undefined> {
    return this.#backend.fleet?.sessions(tenant);
  }

  #denialHandling(clientName: string | undefined): 'server' | 'report' {
    if (this.#config.denialHandling !== 'auto') return this.#config.denialHandling;
    return clientName?.toLowerCase().startsWith('codex') ? 'report' : 'server';
  }

  async create(spec: SessionSpec, options: CreateOptions): Promise<Session> {
    if (this.#closing) throw execError('EXEC_ERR_SHUTTING_DOWN', 'server is shutting down');
    const resolved = resolveSessionSpec(spec, this.#config, this.#denialHandling(options.clientName));
    checkSandboxType(resolved.policy.sandbox.type, this.#deps.sandboxTypes?.(options.tenant) ?? []);
    const release = this.#reserve(options.tenant, 1);
    try {
      return await this.#launch(resolved, options, { env: redactEnv(spec.env) ?? {} });
    } finally {
      release();
    }
  }

  /**
   * Forks `source` `count` ways (session-fork.ts): a snapshot of it (with `memory`, a live
   * template), then that many sessions of its spec made from it. On any failure the sessions
   * made so far go again.
   */
  async fork(source: Session, o: { count: number; memory: boolean; name: string | undefined }): Promise<ForkResult> {
    if (this.#closing) throw execError('EXEC_ERR_SHUTTING_DOWN', 'server is shutting down');
    const release = this.#reserve(source.tenant, o.count);
    try {
      const result = await forkSession(
        source,
        o,
        (spec) => this.#launch(spec, { tenant: source.tenant }, { forkOf: source.id }),
        (s) => this.#remove(s, 'fork failed'),
      );
      this.#metrics.forks.inc({ memory: String(o.memory), result: 'ok' });
      return result;
    } catch (err) {
      this.#metrics.forks.inc({ memory: String(o.memory), result: 'error' });
      throw err;
    } finally {
      release();
    }
  }

  async #launch(
    resolved: ResolvedSessionSpec,
    options: CreateOptions,
    detail: Record<string, unknown>,
  ): Promise<Session> {
    const id = asSessionId(randomUUID());
    try {
      // With an allow-list the proxy is the only way out, whatever the sandbox would grant.
      const network =
        resolved.network === undefined &&
        (resolved.policy.sandbox.type === 'danger-full-access' || resolved.policy.sandbox.networkAccess === true);
      if (resolved.runtime !== undefined && this.#backend.kind !== 'docker') {
        throw execError(
          'EXEC_ERR_INVALID_PARAMS',
          `session.runtime applies to the docker backend only; this server runs the ${this.#backend.kind} backend`,
          { detail: { field: 'session.runtime' } },
        );
      }
      const backendSession = await this.#backend.createSession({
        id,
        tenant: options.tenant,
        image: resolved.image,
        snapshot: resolved.snapshot,
        runtime: resolved.runtime,
        workdir: resolved.workdir,
        labels: resolved.labels,
        resources: resolved.resources,
        network,
        sandboxed: resolved.policy.sandbox.type !== 'danger-full-access',
        hostDirs: hostDirsFor(this.#config, options.tenant),
        writableRoots: resolved.policy.sandbox.type === 'workspace-write' ? resolved.policy.sandbox.writableRoots : [],
        onImagePull: options.onImagePull,
      });
      const session = new Session(id, options.tenant, resolved, backendSession, this.#deps);
      // A fleet's quota slot is taken once the container exists, so concurrent creates on
      // several replicas never overshoot. Until the session is listed, a failure removes it
      // again, retried like a deletion: a container left behind would come back as a session
      // at the next start's recovery.
      try {
        await this.#backend.fleet?.quota?.take(options.tenant, id, this.#config.maxSessionsPerTenant);
        await startEgress(session, backendSession);
        // The record is stored before the create answers: a server SIGKILLed right after its
        // 201 left a container without one, which the next start's recovery removes (it cannot
        // guess the policy), so the session the client was given was gone.
        await session.persistRecord();
      } catch (err) {
        await this.#teardown(session);
        throw err;
      }
      this.#sessions.set(id, session);
      await adoptRestored(session, this.#log);
      // Not awaited: creation answers at once, and the first sandboxed command waits only for
      // what is left of it.
      if (resolved.policy.sandbox.type !== 'danger-full-access' && backendSession.prepareSandbox) {
        backendSession
          .prepareSandbox(resolveSandbox(resolved.policy, backendSession.workdir))
          .catch((err: unknown) =>
            this.#log.warn({ sessionId: id, err }, 'preparing the sandbox ahead of the first command failed'),
          );
      }
      this.#metrics.sessionsCreated.inc({ result: 'ok' });
      this.#auditCreate(session, detail);
      this.#metrics.sessionsActive.set(this.#sessions.size);
      this.#log.info({ sessionId: id, tenant: options.tenant, backend: this.#backend.kind }, 'session created');
      return session;
    } catch (err) {
      this.#metrics.sessionsCreated.inc({ result: 'error' });
      throw toExecError(err);
    }
  }

  /**
   * Makes `count` sessions of one spec at once: all of them, or none (those made before a
   * failure are destroyed again, and the first failure is thrown). The limits are checked for
   * the whole batch before any is made. See batch-create.ts.
   */
  createMany(spec: SessionSpec, count: number, options: CreateOptions): Promise<Session[]> {
    const room = Math.min(
      this.#config.maxSessions - this.#sessions.size - this.#reserved.total,
      this.#config.maxSessionsPerTenant - this.#owned(options.tenant),
    );
    return createBatch(count, room, {
      create: () => this.create(spec, options),
      destroy: (s) => this.#remove(s, 'batch create failed'),
    });
  }

  /** The tenant's sessions: listed here, and being made. */
  #owned(tenant: TenantId): number {
    let owned = this.#reserved.of(tenant);
    for (const s of this.#sessions.values()) if (s.tenant === tenant) owned++;
    return owned;
  }

  /**
   * Refuses `count` more sessions past the server's or the tenant's limit, else holds their
   * places until the returned function gives them back (session-limits.ts).
   */
  #reserve(tenant: TenantId, count: number): () => void {
    const state = { size: this.#sessions.size + this.#reserved.total, owned: this.#owned(tenant) };
    checkLimits(state, this.#config, this.#metrics, count);
    return this.#reserved.take(tenant, count);
  }

  /** The session, if it exists and belongs to `tenant`; otherwise not found (never "forbidden"). */
  get(id: string, tenant: TenantId): Session {
    const session = this.#sessions.get(id as SessionId);
    if (!session || session.tenant !== tenant) throw execError('EXEC_ERR_SESSION_NOT_FOUND', `session ${id} not found`);
    return session;
  }

  /** The session of `id` whatever its tenant (session-token checks), if it is on this server. */
  find(id: string): Session | undefined {
    return this.#sessions.get(id as SessionId);
  }

  list(tenant: TenantId): Session[] {
    return [...this.#sessions.values()].filter((s) => s.tenant === tenant);
  }

  get size(): number {
    return this.#sessions.size;
  }

  async destroy(id: string, tenant: TenantId): Promise<void> {
    const session = this.get(id, tenant);
    await this.#remove(session, 'deleted');
  }

  async #remove(session: Session, why: string): Promise<void> {
    if (!this.#sessions.delete(session.id)) return;
    this.#metrics.sessionsActive.set(this.#sessions.size);
    this.#log.info({ sessionId: session.id, why }, 'session destroyed');
    session.audit({ action: 'session.delete', detail: { why } });
    await this.#teardown(session);
  }

  /** Removes what is left of a session no longer (or not yet) listed; see session-removal.ts. */
  #teardown(session: Session): Promise<void> {
    return removeSession(
      {
        sessionId: session.id,
        first: () => session.destroy(),
        again: () => session.backend.destroy(),
        done: async () => this.#backend.fleet?.quota?.release(session.id),
        stopping: () => this.#closing,
      },
      this.#log,
    );
  }

  /** A backend session that never became one of ours (an unreadable record): its container goes. */
  #discard(backend: BackendSession): Promise<void> {
    const destroy = (): Promise<void> => backend.destroy();
    return removeSession(
      { sessionId: backend.id, first: destroy, again: destroy, done: async () => {}, stopping: () => this.#closing },
      this.#log,
    );
  }

  #auditCreate(session: Session, detail: Record<string, unknown>): void {
    const resolved = session.spec;
    session.audit({
      action: 'session.create',
      detail: {
        backend: this.#backend.kind,
        image: session.backend.image ?? null,
        // A fork or a session from a live template: made from another's snapshot.
        snapshot: resolved.snapshot ?? null,
        sandbox: resolved.policy.sandbox.type,
        approvalPolicy: resolved.policy.approvalPolicy,
        ...detail,
        network: resolved.network === undefined ? null : { allow: [...resolved.network.allow] },
      },
    });
  }

  /**
   * Ends sessions past their lifetime, idle ones (no client, nothing running) and dead ones;
   * idle ones that can hibernate hibernate instead (session-reaper.ts).
   */
  reap(now = Date.now()): Promise<void> {
    return reapSessions([...this.#sessions.values()], this.#reapHost, now);
  }

  /**
   * Server shutdown. `keep` (a fleet's rollout): the sessions are only let go here (their
   * containers, processes and output stay for the next server); otherwise they are removed.
   */
  async close(opts: { keep?: boolean } = {}): Promise<void> {
    this.#closing = true;
    if (this.#reaper) clearInterval(this.#reaper);
    this.#router.stop();
    if (opts.keep) {
      this.#log.info({ sessions: this.#sessions.size }, 'sessions kept for the next server');
      for (const s of this.#sessions.values()) {
        s.disk.stop();
        s.ports.closeAll();
        s.files.close();
      }
      this.#sessions.clear();
      return;
    }
    await Promise.all([...this.#sessions.values()].map((s) => this.#remove(s, 'server shutdown')));
  }
}
