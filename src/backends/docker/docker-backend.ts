/**
 * The docker `Backend`: one hardened container per session (see container-config.ts),
 * startup recovery of this instance's containers, the events watcher that turns a dead
 * container into `lost`, snapshots and the warm pools. It keeps the engine-wide state; the
 * creation pipeline is session-factory.ts, recovery and the events' handling recovery-events.ts,
 * the warm pools (a runtime's, a live template's) warm-pools.ts.
 */
import type Docker from 'dockerode';
import { ExecServerError, execError } from '../../errors.ts';
import type { SessionId, TenantId } from '../../ids.ts';
import type {
  BackendSession,
  BackendSessionSpec,
  FleetBackend,
  ImagePull,
  MemoryCheckpointTotals,
  RecoveredSession,
  SnapshotInfo,
  WarmPoolReport,
} from '../types.ts';
import type { DockerSession } from './docker-session.ts';
import type { DockerBackend } from './docker-backend-types.ts';
import { SessionFactory } from './session-factory.ts';
import { onEvent, reconcile, recover, type RecoveryHost } from './recovery-events.ts';
import { createDockerClient, withDeadline } from './engine/engine-client.ts';
import { EventWatcher, type ContainerEvent } from './engine/event-watcher.ts';
import { DefaultImage, ImagePulls } from './engine/image-pull.ts';
import { AgentLinks } from './agent/agent-links.ts';
import { InstanceLease, REPLICA_LABEL } from './engine/instance-lease.ts';
import { DockerFleet } from './fleet.ts';
import { quotaSlots } from './container/quota-slots.ts';
import { StorageOptSupport } from './container/disk.ts';
import { CheckpointStore } from './checkpoints/checkpoint-store.ts';
import type { HibernatableSession } from './checkpoints/hibernation.ts';
import { LABEL } from './container/labels.ts';
import { resolveOptions, type DockerBackendOptions, type DockerLogger, type ResolvedDockerOptions } from './options.ts';
import { removeContainer } from './container/provision.ts';
import { RuntimeResolver } from './engine/runtimes.ts';
import { deleteSnapshot, findSnapshot, listSnapshots } from './checkpoints/snapshots.ts';
import { createSnapshotQuota } from './checkpoints/snapshot-quota.ts';
import { snapshotMarkers } from './checkpoints/snapshot-markers.ts';
import { WarmPools } from './warm-pools.ts';
import { CreateGate } from './container/create-gate.ts';
import { ImageFacts } from './container/image-facts.ts';
import { AgentVolume } from './agent/agent-volume.ts';

export type { DockerBackend } from './docker-backend-types.ts';

/**
 * Creates the docker backend. Nothing is contacted until the first call; the events watcher
 * and the warm pool start with `recover()` (call it once at startup), or with the first
 * `createSession` when recovery is skipped.
 */
export function createDockerBackend(options: DockerBackendOptions, log: DockerLogger): DockerBackend {
  return new DockerBackendImpl(resolveOptions(options), log);
}

class DockerBackendImpl implements DockerBackend {
  readonly kind = 'docker' as const;
  readonly docker: Docker;
  readonly options: ResolvedDockerOptions;
  readonly #log: DockerLogger;
  readonly #sessions = new Map<string, DockerSession>();
  /** The same sessions as handed out: behind the hibernation gate. */
  readonly #gated = new Map<string, HibernatableSession>();
  readonly #watcher: EventWatcher;
  readonly #defaultImage: DefaultImage;
  /** One pull per missing image, whoever waits for it (sessions, the pool, the readiness check). */
  readonly #pulls: ImagePulls;
  readonly runtimes: RuntimeResolver;
  /** The warm pools: a runtime's, and the live templates' (warm-pools.ts). */
  readonly #warm: WarmPools;
  /** Whether the engine limits writable layers (disk.ts). */
  readonly #storage = new StorageOptSupport();
  /** The server's listeners for exec agents, in directories shared with the engine's host (agent-links.ts). */
  readonly #agentLinks: AgentLinks;
  /** One live server per instance id on the engine, or one lease per replica (instance-lease.ts). */
  readonly #lease: InstanceLease;
  /** Bounds the creates this engine runs at once, sessions before pool refills. */
  readonly #gate: CreateGate;
  /** The exec agent as a volume of the engine's (agent-volume.ts). */
  readonly #agentVolume: AgentVolume;
  /** Shell and environment of the images this engine made containers of (image-facts.ts). */
  readonly #imageFacts = new ImageFacts();
  /** Memory checkpoints of live templates and forks (checkpoint-store.ts). */
  readonly #checkpoints: CheckpointStore;
  /** With `--fleet`: the other replicas and who owns which session (fleet.ts). */
  readonly #fleet: DockerFleet | undefined;
  /** The creation pipeline: sessions' and pool containers (session-factory.ts). */
  readonly #factory: SessionFactory;
  /** When the engine last answered a ping for `createSession`. */
  #pingedAt = 0;
  #started = false;
  #closed = false;

  constructor(options: ResolvedDockerOptions, log: DockerLogger) {
    this.options = options;
    this.#log = log;
    this.docker = createDockerClient(options.dockerHost);
    this.#agentLinks = new AgentLinks(options.agentSocketDir, options.instanceId, log);
    this.#pulls = new ImagePulls(this.docker, log);
    this.#gate = new CreateGate(options.createConcurrency);
    this.#agentVolume = new AgentVolume(this.docker, options.agentBinary, options.engineTimeoutMs, log);
    this.#checkpoints = new CheckpointStore(options.checkpointDir, this.docker, options.engineTimeoutMs);
    this.#lease = new InstanceLease(
      this.docker,
      {
        instanceId: options.instanceId,
        waitMs: options.instanceLeaseWaitMs,
        timeoutMs: options.engineTimeoutMs,
        replica: options.fleet,
        pinVolume: () => this.#agentVolume.pin(),
      },
      log,
    );
    this.#fleet =
      options.fleet === undefined
        ? undefined
        : new DockerFleet(
            {
              docker: this.docker,
              listOwn: () => this.#listOwn(),
              adoptRunning: (c, id, tenant) => this.adoptRunning(c, id, tenant),
              adoptHibernated: (c, id, tenant) => this.adoptHibernated(c, id, tenant),
            },
            options.instanceId,
            options.fleet,
            options.engineTimeoutMs,
            log,
          );
    if (this.#fleet) this.#fleet.quota = quotaSlots([this.docker], options);
    this.#defaultImage = new DefaultImage(this.docker, this.#pulls, options.defaultImage, log, options.engineTimeoutMs);
    this.#watcher = new EventWatcher(
      this.docker,
      options.instanceId,
      log,
      (e) => this.#onEvent(e),
      () => void this.#reconcile(),
    );
    this.runtimes = new RuntimeResolver(this.docker, options.runtime, options.allowedRuntimes, options.engineTimeoutMs);
    this.#warm = new WarmPools({
      ...{ docker: this.docker, options, log, runtimes: this.runtimes, store: this.#checkpoints, gate: this.#gate },
      listSnapshots: () => this.listSnapshots(undefined),
      createPoolEntry: (runtime) => this.#factory.createPoolEntry(runtime),
      provision: (p) => this.#factory.provision({ ...p, labels: { ...this.#ownLabels(), ...p.labels } }),
      removeContainer: (id) => this.#removeContainer(id),
    });
    // In a fleet, snapshots under way are markers in the engine: every replica counts them.
    const snapshotQuota =
      options.snapshotQuota ??
      createSnapshotQuota(
        options.maxSnapshotsPerTenant,
        async (t) => (await this.listSnapshots(t)).map((s) => s.snapshotId),
        options.fleet === undefined ? undefined : { markers: snapshotMarkers(() => this), log },
      );
    this.#factory = new SessionFactory({
      ...{ docker: this.docker, options, log, runtimes: this.runtimes, pulls: this.#pulls },
      ...{ storage: this.#storage, agentLinks: this.#agentLinks, agentVolume: this.#agentVolume },
      ...{ imageFacts: this.#imageFacts, checkpoints: this.#checkpoints, gate: this.#gate, lease: this.#lease },
      ...{ fleet: this.#fleet, sessions: this.#sessions, gated: this.#gated },
      ...{ pools: this.#warm.byRuntime, templates: this.#warm.templates },
      ownLabels: () => this.#ownLabels(),
      snapshotQuota,
      removeContainer: (id) => this.#removeContainer(id),
      deleteSnapshot: (snapshotId, tenant) => this.deleteSnapshot(snapshotId, tenant),
    });
  }

  get fleet(): FleetBackend | undefined {
    return this.#fleet;
  }

  /** Labels every container this server makes carries: its instance, and in a fleet its replica. */
  #ownLabels(): Record<string, string> {
    return {
      [LABEL.instance]: this.options.instanceId,
      ...(this.options.fleet === undefined ? {} : { [REPLICA_LABEL]: this.options.fleet.replicaId }),
    };
  }

  #start(): void {
    if (this.#started || this.#closed) return;
    this.#started = true;
    this.#watcher.start();
    this.#warm.start();
  }

  async ping(): Promise<void> {
    await withDeadline('ping', this.options.pingTimeoutMs, (abortSignal) =>
      (this.docker.ping as (o: object) => Promise<unknown>).call(this.docker, { abortSignal }),
    );
  }

  notReadyReason(): Promise<string | undefined> {
    const lost = this.#lease.lostReason;
    if (lost !== undefined) return Promise.resolve(lost);
    return this.#defaultImage.notReadyReason();
  }

  imagePulls(tenant: TenantId): ImagePull[] {
    return this.#pulls.list(tenant);
  }

  poolReady(runtime?: string): number {
    return this.#warm.ready(runtime);
  }

  poolState(runtime?: string): { ready: number; target: number; creating: number } {
    return this.#warm.state(runtime);
  }

  warmPools(): WarmPoolReport[] {
    return this.#warm.reports();
  }

  async poolFull(timeoutMs: number): Promise<boolean> {
    this.#start();
    return this.#warm.whenFull(timeoutMs);
  }

  async createSession(spec: BackendSessionSpec): Promise<BackendSession> {
    if (this.#closed) throw execError('EXEC_ERR_SHUTTING_DOWN', 'docker backend is closed');
    // Fail fast (pingTimeoutMs) when the engine is down, before any slower step; within a
    // burst one answer a second is enough (each ping is an engine call the create waits for).
    if (Date.now() - this.#pingedAt > 1000) {
      await this.ping();
      this.#pingedAt = Date.now();
    }
    this.#start();
    return this.#factory.createSession(spec);
  }

  #removeContainer(containerId: string): Promise<void> {
    return removeContainer(this.docker, containerId);
  }

  /** Startup recovery of the instance's containers: recovery-events.ts. */
  async recover(): Promise<RecoveredSession[]> {
    const recovered = await recover(this.#recoveryHost);
    this.#start();
    return recovered;
  }

  #listOwn(): Promise<Docker.ContainerInfo[]> {
    return withDeadline('container list', this.options.engineTimeoutMs, (abortSignal) =>
      this.docker.listContainers({
        all: true,
        filters: { label: [`${LABEL.instance}=${this.options.instanceId}`] },
        abortSignal,
      }),
    );
  }

  /** Re-adopts one running container (recovery, a fleet take-over): container/recovery.ts. */
  adoptRunning(c: Docker.ContainerInfo, sessionId: SessionId, tenant: TenantId): Promise<RecoveredSession | undefined> {
    return this.#factory.adoptRunning(c, sessionId, tenant);
  }

  /** Re-adopts a hibernated (stopped, checkpointed) container: container/recovery.ts. */
  adoptHibernated(
    c: Docker.ContainerInfo,
    sessionId: SessionId,
    tenant: TenantId,
  ): Promise<RecoveredSession | undefined> {
    return this.#factory.adoptHibernated(c, sessionId, tenant);
  }

  /** Engine events: recovery-events.ts. */
  #onEvent(e: ContainerEvent): void {
    onEvent(this.#recoveryHost, e);
  }

  /** After an events gap: anything that died meanwhile is lost (recovery-events.ts). */
  #reconcile(): Promise<void> {
    return reconcile(this.#recoveryHost);
  }

  get #recoveryHost(): RecoveryHost {
    return {
      ...{ options: this.options, log: this.#log, runtimes: this.runtimes, lease: this.#lease },
      ...{ agentLinks: this.#agentLinks, fleet: this.#fleet, sessions: this.#sessions, gated: this.#gated },
      ...{ pools: this.#warm.byRuntime, templates: this.#warm.templates },
      listOwn: () => this.#listOwn(),
      adoptRunning: (c, id, tenant) => this.adoptRunning(c, id, tenant),
      adoptHibernated: (c, id, tenant) => this.adoptHibernated(c, id, tenant),
      removeContainer: (id) => this.#removeContainer(id),
    };
  }

  get sessionCount(): number {
    return this.#sessions.size;
  }

  hasSnapshot(snapshotId: string, tenant: TenantId | undefined): Promise<boolean> {
    return findSnapshot(this.docker, snapshotId, tenant, this.options.engineTimeoutMs).then(
      () => true,
      (err: unknown) => {
        if (err instanceof ExecServerError && err.code === 'EXEC_ERR_NOT_FOUND') return false;
        throw err;
      },
    );
  }

  listSnapshots(tenant: TenantId | undefined): Promise<SnapshotInfo[]> {
    return listSnapshots(this.docker, tenant, this.options.engineTimeoutMs);
  }

  async deleteSnapshot(snapshotId: string, tenant: TenantId | undefined): Promise<void> {
    // A template pool's containers use the image: they go first (template-pool.ts).
    const deleted = await this.#warm.templates.whileReleased(snapshotId, tenant, () =>
      deleteSnapshot(this.docker, snapshotId, tenant, this.options.engineTimeoutMs),
    );
    // A live template's memory goes with it.
    await this.#checkpoints.remove(deleted);
  }

  templatePoolReady(template?: string): string[] {
    return this.#warm.templates.readyContainers(template);
  }

  memoryCheckpoints(): MemoryCheckpointTotals {
    return this.#checkpoints.totals;
  }

  async close(): Promise<void> {
    await this.#shutDown((s) => s.destroy());
  }

  async handOver(): Promise<void> {
    // The agents keep their processes and output for the next server, as when this one dies.
    await this.#shutDown(async (s) => s.agent?.detach());
  }

  /**
   * Stops the engine watch and the pools, ends each session's part in this server with `leave`
   * (destroyed, or handed over), then lets the agent links and the lease go (the next server
   * opens the links again at the same paths).
   */
  async #shutDown(leave: (s: DockerSession) => Promise<void>): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#watcher.stop();
    await this.#warm.close();
    await Promise.all([...this.#sessions.values()].map((s) => leave(s).catch(() => undefined)));
    this.#agentLinks.closeAll();
    await this.#lease.release();
  }
}
