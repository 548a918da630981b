/**
 * A pool of Docker engines behind one `Backend` (`--docker-host unix:///a.sock,tcp://b:2375`).
 * Each engine gets its own docker backend (its own client, warm pool, events watcher and
 * instance lease); the pool places new sessions and merges what spans engines (snapshots,
 * pulls, readiness). A session stays on the engine that made it: its calls go straight to that
 * engine's backend, so an engine that stops answering fails only its own sessions' calls, at
 * their deadlines, while new sessions go to the others at once.
 *
 * Placement: the healthy engine with the fewest sessions; a session made from a snapshot goes
 * to an engine that has the snapshot image. Health comes from a ping of every engine every
 * `HEALTH_INTERVAL_MS` and from calls that failed with EXEC_ERR_BACKEND_UNAVAILABLE.
 */
import { ExecServerError, execError } from '../../errors.ts';
import type { TenantId } from '../../ids.ts';
import type {
  Backend,
  BackendSession,
  BackendSessionSpec,
  EngineReport,
  FleetBackend,
  FleetLocation,
  ImagePull,
  MemoryCheckpointTotals,
  RecoveredSession,
  SnapshotInfo,
  WarmPoolReport,
} from '../types.ts';
import type { Leftover } from './checkpoints/checkpoint-store.ts';
import { createDockerBackend, type DockerBackend } from './docker-backend.ts';
import type { DockerBackendOptions, DockerLogger } from './options.ts';
import { commaList } from '../../config/lists.ts';
import { quotaSlots } from './container/quota-slots.ts';
import type { SessionQuota } from '../fleet-types.ts';
import { DockerFleet } from './fleet.ts';
import { createSnapshotQuota, DEFAULT_MAX_SNAPSHOTS } from './checkpoints/snapshot-quota.ts';
import { snapshotMarkers } from './checkpoints/snapshot-markers.ts';

/** How often every engine is pinged (placement skips the ones that did not answer). */
const HEALTH_INTERVAL_MS = 2000;

/** One engine of the pool: its backend and what the last ping or call said of it. */
export interface Member {
  readonly engine: string;
  readonly backend: DockerBackend;
  healthy: boolean;
  reason: string | undefined;
}

/** Splits a `--docker-host` value into its engines (comma-separated, blanks dropped). */
export function engineList(value: string | undefined): string[] {
  return commaList(value);
}

/**
 * The docker backend for `engines`: one engine's backend as it is, or a pool of several. The
 * pool answers `kind: 'docker'` like a single engine, plus `engines()` for reports.
 */
export function createDockerEngines(
  engines: readonly string[],
  options: Omit<DockerBackendOptions, 'dockerHost'>,
  log: DockerLogger & { child?: (bindings: Record<string, unknown>) => DockerLogger },
): Backend {
  if (engines.length <= 1) return createDockerBackend({ ...options, dockerHost: engines[0] }, log);
  // A tenant's snapshots on every engine count, and so do those being taken on any of them (in a
  // fleet: on any replica, by their markers on the first engine, like the session quota's slots).
  const snapshotQuota =
    options.snapshotQuota ??
    createSnapshotQuota(
      options.maxSnapshotsPerTenant ?? DEFAULT_MAX_SNAPSHOTS,
      async (t) => (await pool.listSnapshots(t)).map((s) => s.snapshotId),
      options.fleet === undefined ? undefined : { markers: snapshotMarkers(() => members[0]!.backend), log },
    );
  const members: Member[] = engines.map((engine) => ({
    engine,
    backend: createDockerBackend({ ...options, dockerHost: engine, snapshotQuota }, log.child?.({ engine }) ?? log),
    healthy: true,
    reason: undefined,
  }));
  const pool = new EnginePool(members, log);
  return pool;
}

function unavailable(err: unknown): boolean {
  return err instanceof ExecServerError && err.code === 'EXEC_ERR_BACKEND_UNAVAILABLE';
}

/** The pool itself; exported for its unit test (test/unit/engine-pool.test.ts), built by `createDockerEngines`. */
export class EnginePool implements Backend {
  readonly kind = 'docker' as const;
  readonly #members: readonly Member[];
  readonly #log: DockerLogger;
  #timer: NodeJS.Timeout | undefined;
  #quota: SessionQuota | undefined;

  constructor(members: readonly Member[], log: DockerLogger) {
    this.#members = members;
    this.#log = log;
    // A replica is alive while it holds its lease on any engine that answers: one engine's restart
    // ends the replica's lease there for a moment, and its sessions there must not move for that.
    for (const m of members) {
      const fleet = m.backend.fleet;
      if (fleet instanceof DockerFleet) fleet.liveReplicas = (fresh) => this.#liveReplicas(fresh);
    }
  }

  async #liveReplicas(fresh: boolean): Promise<Map<string, string>> {
    const lists = await Promise.all(
      this.#members
        .filter((m) => m.healthy && m.backend.fleet instanceof DockerFleet)
        .map((m) => (m.backend.fleet as DockerFleet).registry.replicas(fresh).catch(() => new Map<string, string>())),
    );
    const out = new Map<string, string>();
    for (const list of lists) for (const [id, url] of list) if (!out.has(id)) out.set(id, url);
    return out;
  }

  /** Answers when at least one engine does. */
  async ping(): Promise<void> {
    await this.#checkHealth();
    if (this.#members.some((m) => m.healthy)) return;
    throw execError('EXEC_ERR_BACKEND_UNAVAILABLE', `no docker engine of the pool answers: ${this.#describe()}`);
  }

  async notReadyReason(): Promise<string | undefined> {
    const reasons = await Promise.all(
      this.#members.map(async (m) => {
        if (!m.healthy) return m.reason ?? 'does not answer';
        return (m.backend.notReadyReason?.() ?? Promise.resolve(undefined)).catch(
          (err: unknown) => (err as Error).message,
        );
      }),
    );
    // Ready while one engine can take a default session; the others are reported, not blocking.
    if (reasons.some((r) => r === undefined)) return undefined;
    return `no engine of the pool is ready: ${this.#members.map((m, i) => `${m.engine}: ${reasons[i]}`).join('; ')}`;
  }

  /** Every engine with its health and its sessions (for `/readyz` and `/metrics`). */
  engines(): EngineReport[] {
    return this.#members.map((m) => ({
      engine: m.engine,
      healthy: m.healthy,
      sessions: m.backend.sessionCount,
      ...(m.reason === undefined ? {} : { reason: m.reason }),
    }));
  }

  /** The warm pools of every engine, summed by pool (one series per pool, not per engine). */
  warmPools(): WarmPoolReport[] {
    const sums = new Map<string, { pool: string; ready: number; target: number }>();
    for (const r of this.#members.flatMap((m) => m.backend.warmPools())) {
      const sum = sums.get(r.pool) ?? { pool: r.pool, ready: 0, target: 0 };
      sum.ready += r.ready;
      sum.target += r.target;
      sums.set(r.pool, sum);
    }
    return [...sums.values()];
  }

  imagePulls(tenant: TenantId): ImagePull[] {
    return this.#members.flatMap((m) => m.backend.imagePulls?.(tenant) ?? []);
  }

  async createSession(spec: BackendSessionSpec): Promise<BackendSession> {
    const candidates = await this.#candidates(spec);
    let last: unknown;
    for (const m of candidates) {
      try {
        return await m.backend.createSession(spec);
      } catch (err) {
        if (!unavailable(err)) throw err;
        // That engine stopped answering since the last check: the next one takes the session.
        this.#markDown(m, (err as Error).message);
        last = err;
      }
    }
    throw last instanceof ExecServerError
      ? last
      : execError(
          'EXEC_ERR_BACKEND_UNAVAILABLE',
          `no docker engine of the pool can take a session: ${this.#describe()}`,
        );
  }

  /** Healthy engines that can make `spec`, fewest sessions first. */
  async #candidates(spec: BackendSessionSpec): Promise<Member[]> {
    let members = this.#members.filter((m) => m.healthy);
    if (spec.snapshot !== undefined) {
      const snapshot = spec.snapshot;
      const having = await Promise.all(
        members.map((m) => m.backend.hasSnapshot(snapshot, spec.tenant).catch(() => false)),
      );
      members = members.filter((_, i) => having[i]);
      if (members.length === 0) throw execError('EXEC_ERR_NOT_FOUND', `snapshot ${snapshot} is on no healthy engine`);
    }
    if (members.length === 0)
      throw execError('EXEC_ERR_BACKEND_UNAVAILABLE', `no docker engine of the pool answers: ${this.#describe()}`);
    return [...members].sort((a, b) => a.backend.sessionCount - b.backend.sessionCount);
  }

  async recover(): Promise<RecoveredSession[]> {
    const results = await Promise.allSettled(this.#members.map((m) => m.backend.recover()));
    const recovered: RecoveredSession[] = [];
    results.forEach((r, i) => {
      const m = this.#members[i] as Member;
      if (r.status === 'fulfilled') recovered.push(...r.value);
      else if (unavailable(r.reason)) {
        // Its containers stay as they are; a restart once it answers adopts them.
        this.#markDown(m, (r.reason as Error).message);
      } else throw r.reason;
    });
    this.#timer ??= setInterval(() => void this.#checkHealth(), HEALTH_INTERVAL_MS).unref();
    return recovered;
  }

  async listSnapshots(tenant: TenantId | undefined): Promise<SnapshotInfo[]> {
    const lists = await Promise.all(
      this.#members.filter((m) => m.healthy).map((m) => m.backend.listSnapshots(tenant).catch(() => [])),
    );
    return lists.flat();
  }

  memoryCheckpoints(): MemoryCheckpointTotals {
    let count = 0;
    let bytes = 0;
    const failures: Partial<Record<Leftover, number>> = {};
    for (const m of this.#members) {
      const t = m.backend.memoryCheckpoints();
      count += t.count;
      bytes += t.bytes;
      for (const [leftover, n] of Object.entries(t.cleanupFailures ?? {}) as [Leftover, number][])
        failures[leftover] = (failures[leftover] ?? 0) + n;
    }
    return Object.keys(failures).length > 0 ? { count, bytes, cleanupFailures: failures } : { count, bytes };
  }

  async deleteSnapshot(snapshotId: string, tenant: TenantId | undefined): Promise<void> {
    let deleted = false;
    for (const m of this.#members.filter((x) => x.healthy)) {
      try {
        await m.backend.deleteSnapshot(snapshotId, tenant);
        deleted = true;
      } catch (err) {
        if (!(err instanceof ExecServerError && err.code === 'EXEC_ERR_NOT_FOUND')) throw err;
      }
    }
    if (!deleted) throw execError('EXEC_ERR_NOT_FOUND', `no snapshot ${snapshotId}`);
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    await Promise.all(this.#members.map((m) => m.backend.close()));
  }

  async handOver(): Promise<void> {
    clearInterval(this.#timer);
    await Promise.all(this.#members.map((m) => m.backend.handOver()));
  }

  /** With `--fleet`: the fleet over every healthy engine of the pool (each engine's own leases and claims). */
  get fleet(): FleetBackend | undefined {
    const fleets = this.#members.map((m) => ({ m, fleet: m.backend.fleet }));
    const first = fleets[0]?.fleet;
    if (first === undefined) return undefined;
    const healthy = () => fleets.filter((f) => f.m.healthy && f.fleet !== undefined) as { fleet: FleetBackend }[];
    const where = async (id: string, tenant: TenantId) => {
      for (const { fleet } of healthy()) {
        const location = await fleet.locate(id, tenant);
        if (location.kind !== 'absent') return { fleet, location };
      }
      return this.#onDownEngine(fleets, id, tenant);
    };
    // One quota for the pool: its slots on the first engine, its sessions on every engine.
    this.#quota ??= quotaSlots(
      this.#members.map((m) => m.backend.docker),
      this.#members[0]!.backend.options,
    );
    return {
      replicaId: first.replicaId,
      quota: this.#quota,
      sessions: async (tenant) =>
        (await Promise.all(healthy().map(({ fleet }) => fleet.sessions(tenant).catch(() => [])))).flat(),
      replicaUrl: async (replicaId) => {
        for (const { fleet } of healthy()) return fleet.replicaUrl(replicaId);
        return undefined;
      },
      // A replica holds a lease on each engine it reaches: the answering engines' leases together.
      replicas: async () => {
        const each = await Promise.all(healthy().map(({ fleet }) => fleet.replicas().catch(() => new Map())));
        return new Map(each.flatMap((m) => [...m]));
      },
      orphans: async () => (await Promise.all(healthy().map(({ fleet }) => fleet.orphans().catch(() => [])))).flat(),
      sweep: async () => {
        await Promise.all(healthy().map(({ fleet }) => fleet.sweep?.().catch(() => undefined)));
      },
      locate: async (id, tenant) => (await where(id, tenant))?.location ?? { kind: 'absent' },
      takeOver: async (id, tenant) => (await where(id, tenant))?.fleet.takeOver(id, tenant),
    };
  }

  /**
   * A session none of the answering engines has may be on one that does not answer: asked too
   * (it may be back since the last health check); one that still fails makes the lookup fail
   * with the engine's EXEC_ERR_BACKEND_UNAVAILABLE, never "not found" for a session that exists.
   */
  async #onDownEngine(
    fleets: readonly { m: Member; fleet: FleetBackend | undefined }[],
    id: string,
    tenant: TenantId,
  ): Promise<{ fleet: FleetBackend; location: FleetLocation } | undefined> {
    const down: string[] = [];
    for (const { m, fleet } of fleets) {
      if (m.healthy || fleet === undefined) continue;
      try {
        const location = await fleet.locate(id, tenant);
        if (location.kind !== 'absent') return { fleet, location };
      } catch (err) {
        if (!unavailable(err)) throw err;
        down.push(m.engine);
      }
    }
    if (down.length === 0) return undefined;
    throw execError(
      'EXEC_ERR_BACKEND_UNAVAILABLE',
      `session ${id} is on no docker engine that answers, and ${down.join(', ')} does not answer: try again once it does`,
    );
  }

  async #checkHealth(): Promise<void> {
    await Promise.all(
      this.#members.map(async (m) => {
        try {
          await m.backend.ping();
          if (!m.healthy) this.#log.info({ engine: m.engine }, 'docker engine answers again');
          m.healthy = true;
          m.reason = undefined;
        } catch (err) {
          this.#markDown(m, (err as Error).message);
        }
      }),
    );
  }

  #markDown(m: Member, reason: string): void {
    if (m.healthy)
      this.#log.warn({ engine: m.engine, reason }, 'docker engine does not answer: new sessions go elsewhere');
    m.healthy = false;
    m.reason = reason;
  }

  #describe(): string {
    return this.#members.map((m) => `${m.engine} (${m.healthy ? 'answers' : (m.reason ?? 'down')})`).join(', ');
  }
}
