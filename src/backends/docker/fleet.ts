/**
 * One replica's view of its fleet on one engine (docs/architecture.md, "Fleet"): which sessions
 * the fleet has (container labels), who owns each (replica-registry.ts), and the take-over of a
 * session whose owner's lease is gone (an atomic claim, then the adoption recovery does).
 */
import { dirname } from 'node:path';
import type Docker from 'dockerode';
import type { ContainerAdopter } from './container/recovery.ts';
import type { FleetIdentity } from '../../config/fleet.ts';
import { asSessionId, asTenantId, type SessionId, type TenantId } from '../../ids.ts';
import type { FleetBackend, FleetLocation, FleetSession, RecoveredSession } from '../types.ts';
import type { SessionQuota } from '../fleet-types.ts';
import { LINK_MOUNT } from './container/container-config.ts';
import { LABEL, readUserLabels } from './container/labels.ts';
import { parseClaimedName, POOL_NAME_PREFIX } from './container/warm-pool.ts';
import { withDeadline } from './engine/engine-client.ts';
import { REPLICA_LABEL } from './engine/instance-lease.ts';
import { ReplicaRegistry, type Owner } from './engine/replica-registry.ts';
import type { DockerLogger } from './options.ts';

/** The session and tenant of a container of the instance: labels, or the claimed pool name. */
export function sessionOfContainer(c: Docker.ContainerInfo): { sessionId?: string; tenant?: string } {
  const labels = c.Labels ?? {};
  if (labels[LABEL.pool] !== 'true') return { sessionId: labels[LABEL.sessionId], tenant: labels[LABEL.tenant] };
  const claimed = parseClaimedName(c.Names?.[0] ?? '');
  return { sessionId: claimed?.sessionId, tenant: claimed?.tenant };
}

/** The server's link directories a container has mounted (kept while the container exists). */
export function linkDirsOf(c: Docker.ContainerInfo): string[] {
  return (c.Mounts ?? []).filter((m) => m.Destination === LINK_MOUNT).map((m) => dirname(m.Source));
}

/** What the fleet needs of the engine's docker backend. */
export interface FleetHost extends ContainerAdopter {
  readonly docker: Docker;
}

/** One replica's view of its fleet on one engine: the sessions, their owners, take-overs and sweeps. */
export class DockerFleet implements FleetBackend {
  readonly replicaId: string;
  /** Set by the backend (quota-slots.ts); the pool puts one of its own on its fleet. */
  quota: SessionQuota | undefined;
  /**
   * The live replicas (id → advertised URL). On one engine its leases; a pool of engines sets the
   * union over its engines that answer (engine-pool.ts), so a replica that lost one engine for a
   * while (a restart of it) is still alive and keeps its sessions there.
   */
  liveReplicas: (fresh: boolean) => Promise<Map<string, string>>;
  readonly registry: ReplicaRegistry;
  readonly #host: FleetHost;
  readonly #log: DockerLogger;
  readonly #timeoutMs: number;

  constructor(host: FleetHost, instanceId: string, identity: FleetIdentity, timeoutMs: number, log: DockerLogger) {
    this.#host = host;
    this.#timeoutMs = timeoutMs;
    this.replicaId = identity.replicaId;
    this.registry = new ReplicaRegistry(host.docker, instanceId, timeoutMs);
    this.liveReplicas = (fresh) => this.registry.replicas(fresh);
    this.#log = log;
  }

  async sessions(tenant: TenantId): Promise<FleetSession[]> {
    const out: FleetSession[] = [];
    for (const c of await this.#host.listOwn()) {
      const { sessionId, tenant: owner } = sessionOfContainer(c);
      if (sessionId === undefined || owner !== tenant) continue;
      const labels = c.Labels ?? {};
      out.push({
        id: asSessionId(sessionId),
        tenant: asTenantId(owner),
        labels: readUserLabels(labels),
        createdAt: new Date(labels[LABEL.created] ?? c.Created * 1000),
      });
    }
    return out;
  }

  async replicaUrl(replicaId: string): Promise<string | undefined> {
    return (await this.liveReplicas(false)).get(replicaId);
  }

  replicas(): Promise<ReadonlyMap<string, string>> {
    return this.liveReplicas(false);
  }

  async orphans(): Promise<{ id: SessionId; tenant: TenantId }[]> {
    const [list, replicas, claims] = await Promise.all([
      this.#host.listOwn(),
      this.liveReplicas(true),
      this.registry.claims(),
    ]);
    const out: { id: SessionId; tenant: TenantId }[] = [];
    for (const c of list) {
      const { sessionId, tenant } = sessionOfContainer(c);
      if (sessionId === undefined || tenant === undefined) continue;
      const owner = claims.get(sessionId)?.replicaId ?? c.Labels?.[REPLICA_LABEL];
      if (owner !== this.replicaId && (owner === undefined || !replicas.has(owner)))
        out.push({ id: asSessionId(sessionId), tenant: asTenantId(tenant) });
    }
    return out;
  }

  async #find(id: string, tenant: TenantId): Promise<Docker.ContainerInfo | undefined> {
    return (await this.#host.listOwn()).find((c) => {
      const s = sessionOfContainer(c);
      return s.sessionId === id && s.tenant === tenant;
    });
  }

  async locate(id: string, tenant: TenantId): Promise<FleetLocation> {
    const c = await this.#find(id, tenant);
    if (c === undefined) return { kind: 'absent' };
    return this.#where(await this.registry.owner(id, c.Labels ?? {}), false);
  }

  async #where(owner: Owner, fresh: boolean): Promise<FleetLocation> {
    if (owner.replicaId === this.replicaId) return { kind: 'mine' };
    const url = owner.replicaId === undefined ? undefined : (await this.liveReplicas(fresh)).get(owner.replicaId);
    if (owner.replicaId !== undefined && url !== undefined) return { kind: 'remote', replicaId: owner.replicaId, url };
    return { kind: 'orphan' };
  }

  async takeOver(id: string, tenant: TenantId): Promise<RecoveredSession | undefined> {
    const c = await this.#find(id, tenant);
    if (c === undefined) return undefined;
    const owner = await this.registry.owner(id, c.Labels ?? {});
    // The owner's lease is read fresh: a replica that came back (or never left) keeps its session.
    const where = await this.#where(owner, true);
    if (where.kind === 'remote') return undefined;
    if (where.kind === 'orphan') {
      const image = c.ImageID ?? c.Image;
      if (!(await this.registry.claim(id, owner.generation + 1, this.replicaId, image))) return undefined;
      this.#log.info(
        { sessionId: id, from: owner.replicaId ?? null },
        'fleet: took over a session whose owner is gone',
      );
    }
    const sessionId = asSessionId(id);
    if (c.State === 'running') return this.#host.adoptRunning(c, sessionId, tenant);
    return this.#host.adoptHibernated(c, sessionId, tenant);
  }

  /** Why this replica no longer owns `sessionId` (a newer claim is another replica's), if so. */
  async movedFrom(sessionId: string): Promise<string | undefined> {
    const owner = await this.registry.owner(sessionId, {});
    if (owner.generation === 0 || owner.replicaId === this.replicaId) return undefined;
    return `session ${sessionId} is owned by replica ${owner.replicaId ?? '?'} now (this one lost its lease): resume it there`;
  }

  /**
   * For recovery: a function that says whether this replica may act on a container (adopt or
   * remove it): not while its owner is another live replica. A session whose owner is gone is
   * claimed first; false when another replica claimed it first.
   */
  async recoveryOwners(): Promise<(c: Docker.ContainerInfo, sessionId: string | undefined) => Promise<boolean>> {
    const replicas = await this.liveReplicas(true);
    const claims = await this.registry.claims();
    return async (c, sessionId) => {
      const owner = (sessionId === undefined ? undefined : claims.get(sessionId)) ?? {
        replicaId: c.Labels?.[REPLICA_LABEL],
        generation: 0,
      };
      if (owner.replicaId === this.replicaId) return true;
      if (owner.replicaId !== undefined && replicas.has(owner.replicaId)) return false;
      if (sessionId === undefined) return true;
      return this.registry.claim(sessionId, owner.generation + 1, this.replicaId, c.ImageID ?? c.Image);
    };
  }

  /**
   * Removes the warm-pool containers of replicas whose lease is gone (never handed over: no
   * session is in them). By name, not by id: a pool container becomes a session by a rename
   * (`claimedName`), so one its replica claimed meanwhile is not found under the pool name (404)
   * and stays.
   */
  async sweep(): Promise<void> {
    const [list, replicas] = await Promise.all([this.#host.listOwn(), this.liveReplicas(true)]);
    let removed = 0;
    for (const c of list) {
      const name = c.Names?.[0]?.replace(/^\//, '') ?? '';
      const maker = c.Labels?.[REPLICA_LABEL];
      if (c.Labels?.[LABEL.pool] !== 'true' || !name.startsWith(POOL_NAME_PREFIX)) continue;
      if (maker === this.replicaId || (maker !== undefined && replicas.has(maker))) continue;
      const gone = await withDeadline('container remove', this.#timeoutMs, (abortSignal) =>
        this.#host.docker.getContainer(name).remove({ force: true, v: true, abortSignal }),
      ).then(
        () => true,
        () => false,
      );
      if (gone) removed++;
    }
    if (removed > 0) this.#log.info({ removed }, 'fleet: removed the warm-pool containers of replicas that are gone');
  }

  /** After recovery: claims of sessions whose container is gone are removed. */
  async sweepClaims(): Promise<void> {
    const list = await this.#host.listOwn();
    const keep = new Set(list.map((c) => sessionOfContainer(c).sessionId).filter((s) => s !== undefined));
    await this.registry
      .sweepClaims(keep)
      .catch((err: unknown) => this.#log.warn({ err: (err as Error).message }, 'fleet: cannot remove stale claims'));
  }
}
