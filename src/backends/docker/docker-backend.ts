/**
 * The docker `Backend`: one hardened container per session (see container-config.ts),
 * startup recovery of this instance's containers, the events watcher that turns a dead
 * container into `lost`, snapshots and the warm pool.
 */
import { randomUUID } from 'node:crypto';
import type Docker from 'dockerode';
import { ExecServerError, execError } from '../../errors.ts';
import { asContainerId, asSessionId, asTenantId, type SessionId, type TenantId } from '../../ids.ts';
import type {
  Backend,
  BackendSession,
  BackendSessionSpec,
  FleetBackend,
  ImagePull,
  RecoveredSession,
  SnapshotInfo,
} from '../types.ts';
import { DockerSession } from './docker-session.ts';
import { createDockerClient, withDeadline } from './engine/engine-client.ts';
import { EventWatcher, type ContainerEvent } from './engine/event-watcher.ts';
import { DefaultImage, ImagePulls } from './engine/image-pull.ts';
import { AgentLinks } from './agent/agent-links.ts';
import { InstanceLease, REPLICA_LABEL } from './engine/instance-lease.ts';
import { DockerFleet, linkDirsOf, sessionOfContainer } from './fleet.ts';
import { quotaSlots } from './container/quota-slots.ts';
import { type AdoptHost, adoptHibernated, adoptRunning } from './container/recovery.ts';
import { DiskAwareSession, StorageOptSupport } from './container/disk.ts';
import { CheckpointStore } from './checkpoints/checkpoint-store.ts';
import { type TemplateRestore, templateRestorer } from './checkpoints/memory-snapshot.ts';
import { TemplatePools } from './checkpoints/template-pool.ts';
import type { HibernatableSession } from './checkpoints/hibernation.ts';
import { LABEL, userLabels } from './container/labels.ts';
import { resolveOptions, type DockerBackendOptions, type DockerLogger, type ResolvedDockerOptions } from './options.ts';
import { provisionContainer, removeContainer, type ProvisionInput } from './container/provision.ts';
import { checkpointUnsupportedReason, GVISOR_PIDS_ALLOWANCE, isGvisor, RuntimeResolver } from './engine/runtimes.ts';
import { deleteSnapshot, findSnapshot, listSnapshots } from './checkpoints/snapshots.ts';
import { claimedName, WarmPool, type PoolEntry } from './container/warm-pool.ts';
import { CreateGate } from './container/create-gate.ts';
import { ImageFacts } from './container/image-facts.ts';
import { AgentVolume } from './agent/agent-volume.ts';

/** In a fleet, link directories younger than this are not swept (another replica may be making its container). */
const FLEET_SWEEP_MIN_AGE_MS = 10 * 60_000;

/** The docker backend, with a few extras beyond `Backend` for the server and tests. */
export interface DockerBackend extends Backend {
  readonly kind: 'docker';
  /** The dockerode client (tests, diagnostics). */
  readonly docker: Docker;
  readonly options: ResolvedDockerOptions;
  /** Containers ready in the warm pool right now (of one runtime, or of all). */
  poolReady(runtime?: string): number;
  /** Resolves once every runtime's warm pool is full or `timeoutMs` passed; true when full. */
  poolFull(timeoutMs: number): Promise<boolean>;
  /** The size each runtime's warm pool aims at now, and its creates under way (tests, metrics). */
  poolState(runtime?: string): { ready: number; target: number; creating: number };
  /** Which runtimes sessions get and may ask for (runtimes.ts). */
  readonly runtimes: RuntimeResolver;
  /**
   * Stops acting for the instance and gives its lease up, leaving every container and process
   * running for the next server with the same instance id (a hand-over); the backend is closed.
   */
  handOver(): Promise<void>;
  /** Sessions this backend holds now (placement over a pool of engines). */
  readonly sessionCount: number;
  /** Re-adopts one running container of the instance as a session (recovery, a fleet take-over). */
  adoptRunning(c: Docker.ContainerInfo, sessionId: SessionId, tenant: TenantId): Promise<RecoveredSession | undefined>;
  /** Whether this engine has the snapshot `tenant` may use (placement of sessions made from it). */
  hasSnapshot(snapshotId: string, tenant: TenantId | undefined): Promise<boolean>;
  /** Containers restored from a live template ready in its pool (`warmPoolTemplates`), of one or all. */
  templatePoolReady(template?: string): string[];
  /** The memory checkpoints of live templates this backend keeps. */
  memoryCheckpoints(): { count: number; bytes: number };
}

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
  /** One warm pool per runtime asked for (`warmPoolSize` for the default one, `warmPoolRuntimes`). */
  readonly #pools = new Map<string, WarmPool>();
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
  #poolsStarted: Promise<void> | undefined;
  /** Pools of containers restored from live templates (template-pool.ts). */
  readonly #templates: TemplatePools;
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
    this.#templates = new TemplatePools(options.warmPoolTemplates, {
      ...{ docker: this.docker, options, runtimes: this.runtimes, store: this.#checkpoints, log },
      listSnapshots: () => this.listSnapshots(undefined),
      provision: (p) =>
        this.#gate.run('background', () => this.#provision({ ...p, labels: { ...this.#ownLabels(), ...p.labels } })),
      remove: (id) => this.#removeContainer(id),
      rename: (id, name) =>
        withDeadline('container rename', options.engineTimeoutMs, (abortSignal) =>
          this.docker.getContainer(id).rename({ name, abortSignal }),
        ),
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
    this.#templates
      .start()
      .catch((err: unknown) => this.#log.warn({ err: (err as Error).message }, 'no template pool'));
    this.#poolsStarted = this.#startPools().catch((err: unknown) =>
      this.#log.warn({ err: (err as Error).message }, 'warm pool: cannot resolve the runtimes; no pool'),
    );
  }

  async #startPools(): Promise<void> {
    const o = this.options;
    const sizes = new Map<string, { min: number; max: number }>([
      [await this.runtimes.defaultRuntime(), { min: o.warmPoolSize, max: o.warmPoolMax }],
      ...Object.entries(o.warmPoolRuntimes).map(
        ([r, n]) => [r, { min: n, max: n <= 0 ? 0 : Math.max(n, o.warmPoolMax) }] as const,
      ),
    ]);
    for (const [runtime, size] of sizes) {
      if (size.max <= 0 || this.#closed) continue;
      await this.runtimes.resolve(runtime);
      const pool = new WarmPool({
        sizing: { ...size, idleMs: o.warmPoolIdleMs },
        create: () => this.#createPoolEntry(runtime),
        remove: (id) => this.#removeContainer(id),
        gate: this.#gate,
        log: this.#log,
      });
      this.#pools.set(runtime, pool);
      pool.refill();
    }
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
    if (runtime !== undefined) return this.#pools.get(runtime)?.readyCount ?? 0;
    let n = 0;
    for (const pool of this.#pools.values()) n += pool.readyCount;
    return n;
  }

  poolState(runtime?: string): { ready: number; target: number; creating: number } {
    const pools = runtime === undefined ? [...this.#pools.values()] : [this.#pools.get(runtime)];
    const state = { ready: 0, target: 0, creating: 0 };
    for (const p of pools) {
      state.ready += p?.readyCount ?? 0;
      state.target += p?.target ?? 0;
      state.creating += p?.creating ?? 0;
    }
    return state;
  }

  async poolFull(timeoutMs: number): Promise<boolean> {
    this.#start();
    const deadline = Date.now() + timeoutMs;
    await this.#poolsStarted;
    const full = await Promise.all(
      [...this.#pools.values()].map((p) => p.whenFull(Math.max(0, deadline - Date.now()))),
    );
    return full.every(Boolean);
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
    const runtime = await this.runtimes.resolve(spec.runtime);
    const workdir = spec.workdir ?? this.options.defaultWorkdir;
    if (this.#poolMatches(spec, workdir)) {
      const pool = this.#pools.get(runtime);
      pool?.noteDemand();
      const entry = pool?.take();
      if (entry !== undefined) {
        const taken = await this.#claim(entry, spec, runtime).catch((err: unknown) => {
          this.#log.warn({ err: (err as Error).message }, 'warm pool: claim failed, creating a container');
          return undefined;
        });
        if (taken !== undefined) return taken;
      }
    }
    let image = spec.image ?? this.options.defaultImage;
    if (spec.snapshot !== undefined)
      image = (await findSnapshot(this.docker, spec.snapshot, spec.tenant, this.options.engineTimeoutMs)).snapshotId;
    const claimed = spec.snapshot === undefined ? undefined : await this.#templates.claim(spec, image, runtime);
    if (claimed)
      return this.#adopt(spec.id, spec.tenant, claimed, image, workdir, runtime, undefined, claimed.restored);
    const restore =
      spec.snapshot !== undefined && (await this.#checkpoints.has(image))
        ? templateRestorer({
            store: this.#checkpoints,
            engine: await this.runtimes.engine(),
            runtime,
            snapshotId: image,
            sessionId: spec.id,
            timeoutMs: this.options.engineTimeoutMs,
            log: this.#log,
          })
        : undefined;
    const created = await this.#gate.run('live', () => this.#provisionSession(spec, image, workdir, runtime, restore));
    return this.#adopt(spec.id, spec.tenant, created, image, workdir, runtime, undefined, restore);
  }

  #provisionSession(
    spec: BackendSessionSpec,
    image: string,
    workdir: string,
    runtime: string,
    restore: ProvisionInput['restore'],
  ): Promise<PoolEntry> {
    return this.#provision({
      restore,
      name: `exec-server-${spec.id}`,
      image,
      pull:
        spec.snapshot === undefined
          ? () => this.#pulls.pull(image, { tenant: spec.tenant, onProgress: spec.onImagePull })
          : undefined,
      labels: {
        ...userLabels(spec.labels),
        ...this.#ownLabels(),
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
    const d = this.options.defaultResources;
    return (
      spec.snapshot === undefined &&
      (spec.image ?? this.options.defaultImage) === this.options.defaultImage &&
      !spec.network &&
      workdir === this.options.defaultWorkdir &&
      Object.keys(spec.labels).length === 0 &&
      spec.resources.memoryMb === d.memoryMb &&
      spec.resources.cpus === d.cpus &&
      spec.resources.pids === d.pids &&
      // Pool containers carry the default disk limit in the engine, where it enforces one.
      ((spec.resources.diskMb ?? d.diskMb) === d.diskMb || !this.#storage.wanted)
    );
  }

  async #claim(entry: PoolEntry, spec: BackendSessionSpec, runtime: string): Promise<HibernatableSession> {
    const container = this.docker.getContainer(entry.containerId);
    await withDeadline('container rename', this.options.engineTimeoutMs, (abortSignal) =>
      container.rename({ name: claimedName(spec.id, spec.tenant), abortSignal }),
    );
    return this.#adopt(spec.id, spec.tenant, entry, this.options.defaultImage, this.options.defaultWorkdir, runtime);
  }

  async #adopt(
    id: SessionId,
    tenant: TenantId,
    c: PoolEntry,
    image: string,
    workdir: string,
    runtime: string,
    hibernated?: { at: Date; checkpoint: string },
    restored?: Pick<TemplateRestore, 'marks'> | boolean,
  ): Promise<HibernatableSession> {
    const engine = await this.runtimes.engine().catch(() => undefined);
    const session = new DockerSession({
      id,
      tenant,
      docker: this.docker,
      containerId: asContainerId(c.containerId),
      image,
      workdir,
      shellPath: c.shellPath,
      baseEnv: c.baseEnv,
      agent: c.agent,
      agentUnavailable: c.agentUnavailable,
      options: this.options,
      log: this.#log,
      movedTo: this.#fleet === undefined ? undefined : () => this.#fleet?.movedFrom(id) ?? Promise.resolve(undefined),
      forget: (s) => {
        if (this.#sessions.get(s.containerId) === s) {
          this.#sessions.delete(s.containerId);
          this.#gated.delete(s.containerId);
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
        timeoutMs: this.options.engineTimeoutMs,
        log: this.#log,
        hibernated,
        restored,
        memory: {
          store: this.#checkpoints,
          maxBytes: this.options.checkpointMaxMb * 1024 * 1024,
          removeImage: (snapshotId) => this.deleteSnapshot(snapshotId, tenant),
          taken: () => this.#templates.refill(),
          log: this.#log,
        },
      },
      c.diskEnforcement ?? 'watch',
      this.options.engineTimeoutMs,
    );
    this.#sessions.set(c.containerId, session);
    this.#gated.set(c.containerId, gated);
    return gated;
  }

  async #createPoolEntry(runtime: string): Promise<PoolEntry> {
    return this.#provision({
      name: `exec-server-pool-${randomUUID()}`,
      image: this.options.defaultImage,
      pull: () => this.#pulls.pull(this.options.defaultImage),
      labels: {
        ...this.#ownLabels(),
        [LABEL.pool]: 'true',
        [LABEL.created]: new Date().toISOString(),
      },
      resources: this.options.defaultResources,
      network: false,
      workdir: this.options.defaultWorkdir,
      runtime,
    });
  }

  async #provision(p: ProvisionInput): Promise<PoolEntry> {
    const engine = p.runtime === undefined ? undefined : await this.runtimes.engine().catch(() => undefined);
    const gvisor = p.runtime !== undefined && isGvisor(engine?.paths[p.runtime]);
    // gVisor lets nothing inside connect to a host socket (no --host-uds): its agents are reached through the engine.
    const input = {
      ...p,
      pull: p.pull && (() => p.pull!().finally(() => this.#imageFacts.forget(p.image))),
      storage: this.#storage,
      agentLinks: gvisor ? undefined : this.#agentLinks,
      agentVolume: (image: string) => this.#agentVolume.get(image),
      imageFacts: this.#imageFacts,
    };
    const entry = await provisionContainer(
      this.docker,
      this.options,
      this.#log,
      gvisor ? { ...input, resources: { ...p.resources, pids: p.resources.pids + GVISOR_PIDS_ALLOWANCE } } : input,
    );
    // Recovery found no image to hold the lease with: take it now, before this container can be found.
    await this.#lease.ensure(p.image).catch(async (err: unknown) => {
      await this.#removeContainer(entry.containerId).catch(() => undefined);
      throw err;
    });
    return entry;
  }

  #removeContainer(containerId: string): Promise<void> {
    return removeContainer(this.docker, containerId);
  }

  async recover(): Promise<RecoveredSession[]> {
    // A default runtime the engine lacks is a configuration error, reported at startup.
    await this.runtimes.check();
    // Nothing is adopted or removed before this server holds the instance: another live server
    // with the same id keeps its sessions (it is waited for, then this one fails to start).
    await this.#lease.acquireForRecovery(this.options.defaultImage, await this.#listOwn());
    const list = await this.#listOwn();
    // A replica of a fleet leaves the containers of live replicas alone and claims the others.
    const owners = this.#fleet === undefined ? undefined : await this.#fleet.recoveryOwners();
    const recovered: RecoveredSession[] = [];
    const keepDirs = new Set<string>();
    for (const c of list) {
      const { sessionId, tenant } = sessionOfContainer(c);
      if (owners !== undefined && !(await owners(c, sessionId))) {
        for (const dir of linkDirsOf(c)) keepDirs.add(dir);
        continue;
      }
      if (c.State === 'exited' && sessionId !== undefined && tenant !== undefined && !this.#sessions.has(c.Id)) {
        const hibernated = await this.adoptHibernated(c, asSessionId(sessionId), asTenantId(tenant));
        if (hibernated !== undefined) {
          recovered.push(hibernated);
          continue;
        }
      }
      if (c.State !== 'running' || sessionId === undefined || tenant === undefined || this.#sessions.has(c.Id)) {
        if (this.#sessions.has(c.Id)) continue;
        this.#log.info({ containerId: c.Id, state: c.State }, 'recover: removing orphan container');
        await this.#removeContainer(c.Id).catch((err: unknown) =>
          this.#log.warn({ err: (err as Error).message }, 'recover: remove failed'),
        );
        continue;
      }
      const adopted = await this.adoptRunning(c, asSessionId(sessionId), asTenantId(tenant));
      if (adopted !== undefined) recovered.push(adopted);
    }
    if (this.#fleet !== undefined)
      for (const c of await this.#listOwn()) for (const d of linkDirsOf(c)) keepDirs.add(d);
    await this.#agentLinks.sweep(keepDirs, this.#fleet === undefined ? 0 : FLEET_SWEEP_MIN_AGE_MS);
    await this.#fleet?.sweepClaims().catch(() => undefined);
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
      docker: this.docker,
      options: this.options,
      log: this.#log,
      agentLinks: this.#agentLinks,
      runtimes: this.runtimes,
      adopt: (...args) => this.#adopt(...args),
      removeContainer: (id) => this.#removeContainer(id),
    };
  }

  #onEvent(e: ContainerEvent): void {
    if (e.action === 'oom') {
      this.#log.warn({ containerId: e.containerId }, 'session container hit its memory limit');
      return;
    }
    // A checkpoint stops the container on purpose.
    if (e.action === 'die' && this.#gated.get(e.containerId)?.expectsStop === true) return;
    for (const pool of this.#pools.values()) pool.forget(e.containerId);
    this.#templates.forget(e.containerId);
    if (e.action === 'destroy') this.#agentLinks.release(e.containerId);
    const session = this.#sessions.get(e.containerId);
    // The owner of a deleted session removes its claims (recovery sweeps what is left).
    if (e.action === 'destroy' && session !== undefined)
      void this.#fleet?.registry.removeClaims(session.id).catch(() => undefined);
    if (session === undefined || session.destroying) return;
    const code = e.attributes.exitCode;
    session.markLost(
      e.action === 'destroy'
        ? 'container was removed'
        : `container died${code === undefined ? '' : ` (exit code ${code})`}`,
    );
  }

  /** After an events gap: anything that died meanwhile is lost. */
  async #reconcile(): Promise<void> {
    for (const s of [...this.#sessions.values()]) {
      if (s.destroying || s.lostReason !== undefined || this.#gated.get(s.containerId)?.expectsStop === true) continue;
      const running = await s.containerRunning();
      if (running === false) s.markLost('container is not running');
    }
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
    const deleted = await this.#templates.whileReleased(snapshotId, tenant, () =>
      deleteSnapshot(this.docker, snapshotId, tenant, this.options.engineTimeoutMs),
    );
    // A live template's memory goes with it.
    await this.#checkpoints.remove(deleted);
  }

  templatePoolReady(template?: string): string[] {
    return this.#templates.readyContainers(template);
  }

  memoryCheckpoints(): { count: number; bytes: number } {
    return this.#checkpoints.totals;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#watcher.stop();
    await this.#poolsStarted;
    await Promise.all([...this.#pools.values(), this.#templates].map((p) => p.close()));
    await Promise.all([...this.#sessions.values()].map((s) => s.destroy().catch(() => undefined)));
    this.#agentLinks.closeAll();
    await this.#lease.release();
  }

  async handOver(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#watcher.stop();
    await this.#poolsStarted;
    await Promise.all([...this.#pools.values(), this.#templates].map((p) => p.close()));
    // The agents keep their processes and output for the next server, as when this one dies.
    await Promise.all([...this.#sessions.values()].map((s) => s.agent?.detach().catch(() => undefined)));
    // The listeners go too: the next server opens them again at the same paths.
    this.#agentLinks.closeAll();
    await this.#lease.release();
  }
}
