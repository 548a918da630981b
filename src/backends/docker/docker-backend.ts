/**
 * The docker `Backend`: one hardened container per session (see container-config.ts),
 * startup recovery of this instance's containers, the events watcher that turns a dead
 * container into `lost`, snapshots and the warm pool.
 */
import { randomUUID } from 'node:crypto';
import type Docker from 'dockerode';
import { execError } from '../../errors.ts';
import { asContainerId, asSessionId, asTenantId, type SessionId, type TenantId } from '../../ids.ts';
import type { Backend, BackendSession, BackendSessionSpec, RecoveredSession, SnapshotInfo } from '../types.ts';
import { DockerSession } from './docker-session.ts';
import { createDockerClient, withDeadline } from './engine-client.ts';
import { EventWatcher, type ContainerEvent } from './event-watcher.ts';
import { DefaultImage } from './image-pull.ts';
import { runControl } from './exec-runner.ts';
import { LABEL, readUserLabels, userLabels } from './labels.ts';
import { resolveOptions, type DockerBackendOptions, type DockerLogger, type ResolvedDockerOptions } from './options.ts';
import { envOf, installIfWanted, provisionContainer, removeContainer, startAgent, type ProvisionInput } from './provision.ts';
import { RECORD_FILE, SETUP_SCRIPT } from './scripts.ts';
import { deleteSnapshot, findSnapshot, listSnapshots } from './snapshots.ts';
import { claimedName, parseClaimedName, WarmPool, type PoolEntry } from './warm-pool.ts';

/** The docker backend, with a few extras beyond `Backend` for the server and tests. */
export interface DockerBackend extends Backend {
  readonly kind: 'docker';
  /** The dockerode client (tests, diagnostics). */
  readonly docker: Docker;
  readonly options: ResolvedDockerOptions;
  /** Containers ready in the warm pool right now. */
  poolReady(): number;
  /** Resolves once the warm pool is full or `timeoutMs` passed; true when full. */
  poolFull(timeoutMs: number): Promise<boolean>;
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
  readonly #watcher: EventWatcher;
  readonly #pool: WarmPool;
  readonly #defaultImage: DefaultImage;
  #started = false;
  #closed = false;

  constructor(options: ResolvedDockerOptions, log: DockerLogger) {
    this.options = options;
    this.#log = log;
    this.docker = createDockerClient(options.dockerHost);
    this.#defaultImage = new DefaultImage(this.docker, options.defaultImage, log, options.engineTimeoutMs);
    this.#watcher = new EventWatcher(this.docker, options.instanceId, log, (e) => this.#onEvent(e), () => void this.#reconcile());
    this.#pool = new WarmPool(
      options.warmPoolSize,
      () => this.#createPoolEntry(),
      (id) => this.#removeContainer(id),
      log,
    );
  }

  #start(): void {
    if (this.#started || this.#closed) return;
    this.#started = true;
    this.#watcher.start();
    this.#pool.refill();
  }

  async ping(): Promise<void> {
    await withDeadline('ping', this.options.pingTimeoutMs, (abortSignal) => (this.docker.ping as (o: object) => Promise<unknown>).call(this.docker, { abortSignal }));
  }

  notReadyReason(): Promise<string | undefined> {
    return this.#defaultImage.notReadyReason();
  }

  poolReady(): number {
    return this.#pool.readyCount;
  }

  poolFull(timeoutMs: number): Promise<boolean> {
    this.#start();
    return this.#pool.whenFull(timeoutMs);
  }

  async createSession(spec: BackendSessionSpec): Promise<BackendSession> {
    if (this.#closed) throw execError('EXEC_ERR_SHUTTING_DOWN', 'docker backend is closed');
    // Fail fast (pingTimeoutMs) when the engine is down, before any slower step.
    await this.ping();
    this.#start();
    const workdir = spec.workdir ?? this.options.defaultWorkdir;
    if (this.#poolMatches(spec, workdir)) {
      const entry = this.#pool.take();
      if (entry !== undefined) {
        const taken = await this.#claim(entry, spec).catch((err: unknown) => {
          this.#log.warn({ err: (err as Error).message }, 'warm pool: claim failed, creating a container');
          return undefined;
        });
        if (taken !== undefined) return taken;
      }
    }
    let image = spec.image ?? this.options.defaultImage;
    if (spec.snapshot !== undefined) image = (await findSnapshot(this.docker, spec.snapshot, spec.tenant, this.options.engineTimeoutMs)).snapshotId;
    const created = await this.#provision({
      name: `exec-server-${spec.id}`,
      image,
      mayPull: spec.snapshot === undefined,
      labels: {
        ...userLabels(spec.labels),
        [LABEL.instance]: this.options.instanceId,
        [LABEL.sessionId]: spec.id,
        [LABEL.tenant]: spec.tenant,
        [LABEL.created]: new Date().toISOString(),
        [LABEL.workdir]: workdir,
        [LABEL.pool]: 'false',
      },
      resources: spec.resources,
      network: spec.network,
      workdir,
    });
    return this.#adopt(spec.id, spec.tenant, created, image, workdir);
  }

  #poolMatches(spec: BackendSessionSpec, workdir: string): boolean {
    const d = this.options.defaultResources;
    return (
      this.options.warmPoolSize > 0 &&
      spec.snapshot === undefined &&
      (spec.image ?? this.options.defaultImage) === this.options.defaultImage &&
      !spec.network &&
      workdir === this.options.defaultWorkdir &&
      Object.keys(spec.labels).length === 0 &&
      spec.resources.memoryMb === d.memoryMb &&
      spec.resources.cpus === d.cpus &&
      spec.resources.pids === d.pids
    );
  }

  async #claim(entry: PoolEntry, spec: BackendSessionSpec): Promise<DockerSession> {
    const container = this.docker.getContainer(entry.containerId);
    await withDeadline('container rename', this.options.engineTimeoutMs, (abortSignal) =>
      container.rename({ name: claimedName(spec.id, spec.tenant), abortSignal }),
    );
    return this.#adopt(spec.id, spec.tenant, entry, this.options.defaultImage, this.options.defaultWorkdir);
  }

  #adopt(id: SessionId, tenant: TenantId, c: PoolEntry, image: string, workdir: string): DockerSession {
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
      forget: (s) => {
        if (this.#sessions.get(s.containerId) === s) this.#sessions.delete(s.containerId);
      },
    });
    this.#sessions.set(c.containerId, session);
    return session;
  }

  async #createPoolEntry(): Promise<PoolEntry> {
    return this.#provision({
      name: `exec-server-pool-${randomUUID()}`,
      image: this.options.defaultImage,
      mayPull: true,
      labels: { [LABEL.instance]: this.options.instanceId, [LABEL.pool]: 'true', [LABEL.created]: new Date().toISOString() },
      resources: this.options.defaultResources,
      network: false,
      workdir: this.options.defaultWorkdir,
    });
  }

  #provision(p: ProvisionInput): Promise<PoolEntry> {
    return provisionContainer(this.docker, this.options, this.#log, p);
  }

  #removeContainer(containerId: string): Promise<void> {
    return removeContainer(this.docker, containerId);
  }

  async recover(): Promise<RecoveredSession[]> {
    const list = await withDeadline('container list', this.options.engineTimeoutMs, (abortSignal) =>
      this.docker.listContainers({ all: true, filters: { label: [`${LABEL.instance}=${this.options.instanceId}`] }, abortSignal }),
    );
    const recovered: RecoveredSession[] = [];
    for (const c of list) {
      const labels = c.Labels ?? {};
      const claimed = labels[LABEL.pool] === 'true' ? parseClaimedName(c.Names?.[0] ?? '') : undefined;
      const sessionId = labels[LABEL.pool] === 'true' ? claimed?.sessionId : labels[LABEL.sessionId];
      const tenant = labels[LABEL.pool] === 'true' ? claimed?.tenant : labels[LABEL.tenant];
      if (c.State !== 'running' || sessionId === undefined || tenant === undefined || this.#sessions.has(c.Id)) {
        if (this.#sessions.has(c.Id)) continue;
        this.#log.info({ containerId: c.Id, state: c.State }, 'recover: removing orphan container');
        await this.#removeContainer(c.Id).catch((err: unknown) => this.#log.warn({ err: (err as Error).message }, 'recover: remove failed'));
        continue;
      }
      const workdir = labels[LABEL.workdir] ?? this.options.defaultWorkdir;
      try {
        const container = this.docker.getContainer(c.Id);
        // Idempotent: also tells the shell and proves the container still runs commands.
        const setup = await runControl(container, { cmd: ['/bin/sh', '-c', SETUP_SCRIPT, 'sh', workdir], timeoutMs: this.options.engineTimeoutMs });
        if (setup.exitCode !== 0) throw new Error(setup.stderr.trim());
        const info = await withDeadline('container inspect', this.options.engineTimeoutMs, (abortSignal) => container.inspect({ abortSignal }));
        // The agent kept running with the container: attaching finds it (and its processes).
        const installed = await installIfWanted(container, this.options, { running: true });
        const agent = installed === true ? await startAgent(container, this.options, this.#log) : { agentUnavailable: installed };
        const session = this.#adopt(
          asSessionId(sessionId),
          asTenantId(tenant),
          { containerId: c.Id, shellPath: setup.stdout.toString('utf8').trim() || '/bin/sh', baseEnv: envOf(info.Config.Env), ...agent },
          labels[LABEL.pool] === 'true' ? this.options.defaultImage : c.Image,
          workdir,
        );
        const created = labels[LABEL.created] ?? info.Created;
        const stored = await runControl(container, { cmd: ['cat', RECORD_FILE], timeoutMs: this.options.engineTimeoutMs, maxStdout: 64 * 1024 });
        const record = stored.exitCode === 0 ? stored.stdout.toString('utf8') : undefined;
        const channel = session.agent;
        recovered.push({
          session,
          tenant: asTenantId(tenant),
          labels: readUserLabels(labels),
          createdAt: new Date(created),
          record,
          ...(channel ? { adoptProcesses: (adopt: Parameters<NonNullable<RecoveredSession['adoptProcesses']>>[0]) => channel.recover(adopt) } : {}),
        });
        this.#log.info({ sessionId, containerId: c.Id }, 'recover: re-adopted session');
      } catch (err) {
        this.#log.warn({ containerId: c.Id, err: (err as Error).message }, 'recover: cannot re-adopt, removing');
        await this.#removeContainer(c.Id).catch(() => undefined);
      }
    }
    this.#start();
    return recovered;
  }

  #onEvent(e: ContainerEvent): void {
    if (e.action === 'oom') {
      this.#log.warn({ containerId: e.containerId }, 'session container hit its memory limit');
      return;
    }
    this.#pool.forget(e.containerId);
    const session = this.#sessions.get(e.containerId);
    if (session === undefined || session.destroying) return;
    const code = e.attributes.exitCode;
    session.markLost(e.action === 'destroy' ? 'container was removed' : `container died${code === undefined ? '' : ` (exit code ${code})`}`);
  }

  /** After an events gap: anything that died meanwhile is lost. */
  async #reconcile(): Promise<void> {
    for (const s of [...this.#sessions.values()]) {
      if (s.destroying || s.lostReason !== undefined) continue;
      const running = await s.containerRunning();
      if (running === false) s.markLost('container is not running');
    }
  }

  listSnapshots(tenant: TenantId | undefined): Promise<SnapshotInfo[]> {
    return listSnapshots(this.docker, tenant, this.options.engineTimeoutMs);
  }

  deleteSnapshot(snapshotId: string, tenant: TenantId | undefined): Promise<void> {
    return deleteSnapshot(this.docker, snapshotId, tenant, this.options.engineTimeoutMs);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#watcher.stop();
    await this.#pool.close();
    await Promise.all([...this.#sessions.values()].map((s) => s.destroy().catch(() => undefined)));
  }
}
