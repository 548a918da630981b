/**
 * The docker backend's creation pipeline: a session's container from the warm pool or made for
 * it (a snapshot's, restored from a live template's memory when the store has it), pool
 * containers, the session objects around a container, and re-adoption (container/recovery.ts).
 * Beside docker-backend.ts, which keeps the engine-wide state and hands this what it uses.
 */
import { randomUUID } from 'node:crypto';
import type Docker from 'dockerode';
import { asContainerId, type SessionId, type TenantId } from '../../ids.ts';
import type { BackendSession, BackendSessionSpec, RecoveredSession } from '../types.ts';
import { type Adoption, type AdoptHost, adoptHibernated, adoptRunning } from './container/recovery.ts';
import { DockerSession } from './docker-session.ts';
import { withDeadline } from './engine/engine-client.ts';
import type { ImagePulls } from './engine/image-pull.ts';
import type { AgentLinks } from './agent/agent-links.ts';
import type { InstanceLease } from './engine/instance-lease.ts';
import type { DockerFleet } from './fleet.ts';
import { DiskAwareSession, type StorageOptSupport } from './container/disk.ts';
import type { CheckpointStore } from './checkpoints/checkpoint-store.ts';
import { type TemplateRestore, templateRestorer } from './checkpoints/memory-snapshot.ts';
import type { TemplatePools } from './checkpoints/template-pool.ts';
import type { SnapshotQuota } from './checkpoints/snapshot-quota.ts';
import type { HibernatableSession } from './checkpoints/hibernation.ts';
import { LABEL, userLabels } from './container/labels.ts';
import type { DockerLogger, ResolvedDockerOptions } from './options.ts';
import { provisionContainer, type ProvisionInput } from './container/provision.ts';
import {
  checkpointUnsupportedReason,
  GVISOR_PIDS_ALLOWANCE,
  isGvisor,
  type RuntimeResolver,
} from './engine/runtimes.ts';
import { findSnapshot, refuseForeignSnapshot } from './checkpoints/snapshots.ts';
import { claimedName, POOL_NAME_PREFIX, type PoolEntry, type WarmPool } from './container/warm-pool.ts';
import type { CreateGate } from './container/create-gate.ts';
import type { ImageFacts } from './container/image-facts.ts';
import type { AgentVolume } from './agent/agent-volume.ts';

/** What the creation pipeline uses of the docker backend. */
export interface SessionFactoryDeps {
  readonly docker: Docker;
  readonly options: ResolvedDockerOptions;
  readonly log: DockerLogger;
  readonly runtimes: RuntimeResolver;
  readonly pulls: Pick<ImagePulls, 'pull'>;
  /** The warm pools by runtime (the backend starts them). */
  readonly pools: ReadonlyMap<string, Pick<WarmPool, 'noteDemand' | 'take'>>;
  readonly storage: StorageOptSupport;
  readonly agentLinks: AgentLinks;
  readonly agentVolume: Pick<AgentVolume, 'get'>;
  readonly imageFacts: ImageFacts;
  readonly checkpoints: CheckpointStore;
  readonly gate: Pick<CreateGate, 'run'>;
  readonly lease: Pick<InstanceLease, 'ensure'>;
  readonly fleet: Pick<DockerFleet, 'movedFrom' | 'registry'> | undefined;
  /** Pools of containers restored from live templates, asked first for a snapshot's session. */
  readonly templates: Pick<TemplatePools, 'claim' | 'refill'>;
  /** The backend's sessions by container id, and the same as handed out (behind the hibernation gate). */
  readonly sessions: Map<string, DockerSession>;
  readonly gated: Map<string, HibernatableSession>;
  /** Labels every container this server makes carries. */
  ownLabels(): Record<string, string>;
  /** Every snapshot of a session takes a place of its tenant's (snapshot-quota.ts). */
  readonly snapshotQuota: SnapshotQuota;
  removeContainer(containerId: string): Promise<void>;
  deleteSnapshot(snapshotId: string, tenant: TenantId | undefined): Promise<void>;
}

/** Makes sessions' and pool containers and the session objects around them. */
export class SessionFactory {
  readonly #d: SessionFactoryDeps;

  constructor(deps: SessionFactoryDeps) {
    this.#d = deps;
  }

  /** A session's container (after the backend's engine check): from the warm pool, or made for it. */
  async createSession(spec: BackendSessionSpec): Promise<BackendSession> {
    const runtime = await this.#d.runtimes.resolve(spec.runtime);
    const workdir = spec.workdir ?? this.#d.options.defaultWorkdir;
    if (this.#poolMatches(spec, workdir)) {
      const pool = this.#d.pools.get(runtime);
      pool?.noteDemand();
      const entry = pool?.take();
      if (entry !== undefined) {
        const taken = await this.#claim(entry, spec, runtime).catch((err: unknown) => {
          this.#d.log.warn({ err: (err as Error).message }, 'warm pool: claim failed, creating a container');
          return undefined;
        });
        if (taken !== undefined) return taken;
      }
    }
    let image = spec.image ?? this.#d.options.defaultImage;
    const timeoutMs = this.#d.options.engineTimeoutMs;
    if (spec.snapshot !== undefined)
      image = (await findSnapshot(this.#d.docker, spec.snapshot, spec.tenant, timeoutMs)).snapshotId;
    // The engine resolves any image, a snapshot's id (or a prefix of it) too: only the owner's.
    else if (spec.image !== undefined && spec.image !== this.#d.options.defaultImage)
      await refuseForeignSnapshot(this.#d.docker, spec.image, spec.tenant, timeoutMs);
    const claimed = spec.snapshot === undefined ? undefined : await this.#d.templates.claim(spec, image, runtime);
    if (claimed)
      return this.adopt(
        { id: spec.id, tenant: spec.tenant, entry: claimed, image, workdir, runtime },
        claimed.restored,
      );
    const restore =
      spec.snapshot !== undefined && (await this.#d.checkpoints.has(image))
        ? templateRestorer({
            store: this.#d.checkpoints,
            engine: await this.#d.runtimes.engine(),
            runtime,
            snapshotId: image,
            sessionId: spec.id,
            timeoutMs,
            log: this.#d.log,
          })
        : undefined;
    const created = await this.#d.gate.run('live', () =>
      this.#provisionSession(spec, image, workdir, runtime, restore),
    );
    return this.adopt({ id: spec.id, tenant: spec.tenant, entry: created, image, workdir, runtime }, restore);
  }

  #provisionSession(
    spec: BackendSessionSpec,
    image: string,
    workdir: string,
    runtime: string,
    restore: ProvisionInput['restore'],
  ): Promise<PoolEntry> {
    return this.provision({
      restore,
      name: `exec-server-${spec.id}`,
      image,
      pull:
        spec.snapshot === undefined
          ? () => this.#d.pulls.pull(image, { tenant: spec.tenant, onProgress: spec.onImagePull })
          : undefined,
      labels: {
        ...userLabels(spec.labels),
        ...this.#d.ownLabels(),
        [LABEL.sessionId]: spec.id,
        [LABEL.tenant]: spec.tenant,
        [LABEL.created]: new Date().toISOString(),
        [LABEL.workdir]: workdir,
        [LABEL.pool]: 'false',
      },
      resources: spec.resources,
      network: spec.network,
      workdir,
      runtime,
    });
  }

  #poolMatches(spec: BackendSessionSpec, workdir: string): boolean {
    const d = this.#d.options.defaultResources;
    return (
      spec.snapshot === undefined &&
      (spec.image ?? this.#d.options.defaultImage) === this.#d.options.defaultImage &&
      !spec.network &&
      workdir === this.#d.options.defaultWorkdir &&
      Object.keys(spec.labels).length === 0 &&
      spec.resources.memoryMb === d.memoryMb &&
      spec.resources.cpus === d.cpus &&
      spec.resources.pids === d.pids &&
      // Pool containers carry the default disk limit in the engine, where it enforces one.
      ((spec.resources.diskMb ?? d.diskMb) === d.diskMb || !this.#d.storage.wanted)
    );
  }

  async #claim(entry: PoolEntry, spec: BackendSessionSpec, runtime: string): Promise<HibernatableSession> {
    const container = this.#d.docker.getContainer(entry.containerId);
    await withDeadline('container rename', this.#d.options.engineTimeoutMs, (abortSignal) =>
      container.rename({ name: claimedName(spec.id, spec.tenant), abortSignal }),
    );
    const { defaultImage: image, defaultWorkdir: workdir } = this.#d.options;
    return this.adopt({ id: spec.id, tenant: spec.tenant, entry, image, workdir, runtime });
  }

  /** The session object of a container, entered in the backend's maps (creation, recovery). */
  async adopt(a: Adoption, restored?: Pick<TemplateRestore, 'marks'> | boolean): Promise<HibernatableSession> {
    const { id, tenant, entry: c, image, workdir, runtime, hibernated } = a;
    const engine = await this.#d.runtimes.engine().catch(() => undefined);
    const session = new DockerSession({
      id,
      tenant,
      docker: this.#d.docker,
      containerId: asContainerId(c.containerId),
      image,
      workdir,
      shellPath: c.shellPath,
      baseEnv: c.baseEnv,
      agent: c.agent,
      agentUnavailable: c.agentUnavailable,
      options: this.#d.options,
      log: this.#d.log,
      movedTo:
        this.#d.fleet === undefined ? undefined : () => this.#d.fleet?.movedFrom(id) ?? Promise.resolve(undefined),
      released:
        this.#d.fleet === undefined ? undefined : () => this.#d.fleet?.registry.removeClaims(id) ?? Promise.resolve(),
      forget: (s) => {
        if (this.#d.sessions.get(s.containerId) === s) {
          this.#d.sessions.delete(s.containerId);
          this.#d.gated.delete(s.containerId);
        }
      },
    });
    const gated = new DiskAwareSession(
      {
        inner: session,
        runtime,
        unsupportedReason:
          engine === undefined
            ? 'the engine did not say which runtimes can checkpoint'
            : checkpointUnsupportedReason(engine, runtime),
        timeoutMs: this.#d.options.engineTimeoutMs,
        log: this.#d.log,
        hibernated,
        restored,
        quota: this.#d.snapshotQuota,
        memory: {
          store: this.#d.checkpoints,
          maxBytes: this.#d.options.checkpointMaxMb * 1024 * 1024,
          removeImage: (snapshotId) => this.#d.deleteSnapshot(snapshotId, tenant),
          taken: () => this.#d.templates.refill(),
          log: this.#d.log,
        },
      },
      c.diskEnforcement ?? 'watch',
      this.#d.options.engineTimeoutMs,
    );
    this.#d.sessions.set(c.containerId, session);
    this.#d.gated.set(c.containerId, gated);
    return gated;
  }

  /** Re-adopts one running container (recovery, a fleet take-over): container/recovery.ts. */
  adoptRunning(c: Docker.ContainerInfo, sessionId: SessionId, tenant: TenantId): Promise<RecoveredSession | undefined> {
    return adoptRunning(this.#adoptHost, c, sessionId, tenant);
  }

  /** Re-adopts a hibernated (stopped, checkpointed) container: container/recovery.ts. */
  adoptHibernated(
    c: Docker.ContainerInfo,
    sessionId: SessionId,
    tenant: TenantId,
  ): Promise<RecoveredSession | undefined> {
    return adoptHibernated(this.#adoptHost, c, sessionId, tenant);
  }

  get #adoptHost(): AdoptHost {
    return {
      docker: this.#d.docker,
      options: this.#d.options,
      log: this.#d.log,
      agentLinks: this.#d.agentLinks,
      runtimes: this.#d.runtimes,
      adopt: (adoption) => this.adopt(adoption),
      removeContainer: (id) => this.#d.removeContainer(id),
    };
  }

  /** One container for the warm pool of `runtime`. */
  async createPoolEntry(runtime: string): Promise<PoolEntry> {
    return this.provision({
      name: `${POOL_NAME_PREFIX}${randomUUID()}`,
      image: this.#d.options.defaultImage,
      pull: () => this.#d.pulls.pull(this.#d.options.defaultImage),
      labels: {
        ...this.#d.ownLabels(),
        [LABEL.pool]: 'true',
        [LABEL.created]: new Date().toISOString(),
      },
      resources: this.#d.options.defaultResources,
      network: false,
      workdir: this.#d.options.defaultWorkdir,
      runtime,
    });
  }

  /** Makes and starts one container (provision.ts) with this engine's agent, storage and lease. */
  async provision(p: ProvisionInput): Promise<PoolEntry> {
    const engine = p.runtime === undefined ? undefined : await this.#d.runtimes.engine().catch(() => undefined);
    const gvisor = p.runtime !== undefined && isGvisor(engine?.paths[p.runtime]);
    // gVisor lets nothing inside connect to a host socket (no --host-uds): its agents are reached through the engine.
    const input = {
      ...p,
      pull: p.pull && (() => p.pull!().finally(() => this.#d.imageFacts.forget(p.image))),
      storage: this.#d.storage,
      agentLinks: gvisor ? undefined : this.#d.agentLinks,
      agentVolume: (image: string) => this.#d.agentVolume.get(image),
      imageFacts: this.#d.imageFacts,
    };
    const entry = await provisionContainer(
      this.#d.docker,
      this.#d.options,
      this.#d.log,
      gvisor ? { ...input, resources: { ...p.resources, pids: p.resources.pids + GVISOR_PIDS_ALLOWANCE } } : input,
    );
    // Recovery found no image to hold the lease with: take it now, before this container can be found.
    await this.#d.lease.ensure(p.image).catch(async (err: unknown) => {
      await this.#d.removeContainer(entry.containerId).catch(() => undefined);
      throw err;
    });
    return entry;
  }
}
