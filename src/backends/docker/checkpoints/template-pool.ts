/**
 * Warm pools filled from live templates (`--warm-pool-templates NAME=N`; docs/snapshots.md):
 * per template, N containers already restored from its checkpoint, their processes running, so
 * a session made from the template claims one at once instead of waiting for a restore. Kept
 * apart from the default image's pool (container/warm-pool.ts): a template pool follows its
 * template (looked up by name, again when a memory snapshot is taken and every few seconds),
 * and lets its containers go before the template is deleted.
 */
import { randomUUID } from 'node:crypto';
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import type { TenantId } from '../../../ids.ts';
import type { BackendSessionSpec, SnapshotInfo, WarmPoolReport } from '../../types.ts';
import type { ProvisionInput } from '../container/provision.ts';
import { LABEL } from '../container/labels.ts';
import { claimedName, POOL_NAME_PREFIX, type PoolEntry } from '../container/warm-pool.ts';
import { withDeadline } from '../engine/engine-client.ts';
import { checkpointUnsupportedReason, type RuntimeResolver } from '../engine/runtimes.ts';
import type { DockerLogger, ResolvedDockerOptions } from '../options.ts';
import type { CheckpointStore } from './checkpoint-store.ts';
import { findSnapshot } from './snapshots.ts';
import { type TemplateRestore, templateRestorer } from './memory-snapshot.ts';

/** How often a pool looks its template up again (made by another server, or replaced). */
const LOOKUP_INTERVAL_MS = 5000;

/** What the pools need of the backend. */
export interface TemplatePoolHost {
  readonly docker: Docker;
  readonly options: ResolvedDockerOptions;
  readonly runtimes: RuntimeResolver;
  readonly store: CheckpointStore;
  readonly log: DockerLogger;
  /** Every tenant's snapshots. */
  listSnapshots(): Promise<SnapshotInfo[]>;
  /** Makes a container of this server's (its own labels added). */
  provision(p: ProvisionInput): Promise<PoolEntry>;
  /** Removes a container by id or by name (gone already is fine). */
  remove(containerId: string): Promise<void>;
  rename(containerId: string, name: string): Promise<void>;
}

/** A claimed container, and what its session adopts its processes with. */
export type ClaimedEntry = PoolEntry & { readonly restored: Pick<TemplateRestore, 'marks'> };

interface Pool {
  readonly name: string;
  readonly size: number;
  /** The template it is filled from now (undefined: none found yet). */
  snapshotId: string | undefined;
  /** A template being deleted: not filled from again. */
  released: string | undefined;
  readonly ready: PoolEntry[];
  filling: Promise<void> | undefined;
  /** A refill was asked for while filling (the template may have changed meanwhile): look again after. */
  again: boolean;
}

/** The pools of containers restored from live templates, one per `--warm-pool-templates` entry. */
export class TemplatePools {
  readonly #pools: Pool[];
  readonly #host: TemplatePoolHost;
  #closed = false;
  #timer: NodeJS.Timeout | undefined;
  /** The runtime the pools' containers run on: the first of this server's that can checkpoint. */
  #runtime: string | undefined;

  constructor(sizes: Readonly<Record<string, number>>, host: TemplatePoolHost) {
    this.#host = host;
    this.#pools = Object.entries(sizes)
      .filter(([, size]) => size > 0)
      .map(([name, size]) => ({
        name,
        size,
        snapshotId: undefined,
        released: undefined,
        ready: [],
        filling: undefined,
        again: false,
      }));
  }

  /** Starts filling, and looking the templates up again every few seconds. */
  async start(): Promise<void> {
    if (this.#closed || this.#pools.length === 0 || this.#timer !== undefined) return;
    const engine = await this.#host.runtimes.engine();
    const runtimes = await this.#host.runtimes.allowed();
    this.#runtime = runtimes.find((r) => checkpointUnsupportedReason(engine, r) === undefined);
    if (this.#runtime === undefined)
      throw execError(
        'EXEC_ERR_CONFIG',
        '--warm-pool-templates: no runtime this server allows can checkpoint here (a gVisor runtime with checkpoints is needed)',
      );
    this.#timer = setInterval(() => this.refill(), LOOKUP_INTERVAL_MS);
    this.#timer.unref();
    this.refill();
  }

  /** The newest live template called `name` (a snapshot name or id) whose checkpoint is here. */
  async #resolve(name: string): Promise<string | undefined> {
    const found = (await this.#host.listSnapshots()).filter(
      (t) => t.memory === true && (t.name === name || t.snapshotId === name || t.snapshotId === `sha256:${name}`),
    );
    const id = found.at(-1)?.snapshotId;
    return id !== undefined && (await this.#host.store.has(id)) ? id : undefined;
  }

  /** A container restored from `snapshotId`, made as the template's source was (its network). */
  async #create(snapshotId: string): Promise<PoolEntry> {
    const h = this.#host;
    const runtime = this.#runtime!;
    return h.provision({
      name: `${POOL_NAME_PREFIX}${randomUUID()}`,
      image: snapshotId,
      pull: undefined,
      labels: { [LABEL.pool]: 'true', [LABEL.created]: new Date().toISOString() },
      resources: h.options.defaultResources,
      network: (await h.store.meta(snapshotId)).network === true,
      workdir: h.options.defaultWorkdir,
      runtime,
      restore: templateRestorer({
        ...{ store: h.store, engine: await h.runtimes.engine(), runtime, snapshotId, sessionId: 'template-pool' },
        ...{ timeoutMs: h.options.engineTimeoutMs, log: h.log },
      }),
    });
  }

  /**
   * A ready container of `snapshotId`'s pool renamed for `spec`'s session, or undefined (no pool,
   * none ready, a spec unlike the pool's containers, or the claim failed: then it is removed).
   */
  async claim(spec: BackendSessionSpec, snapshotId: string, runtime: string): Promise<ClaimedEntry | undefined> {
    const h = this.#host;
    if (this.#pools.length === 0 || runtime !== this.#runtime || !templatePoolMatches(spec, h.options)) return;
    if (!this.#pools.some((p) => p.snapshotId === snapshotId && p.ready.length > 0)) return;
    const meta = await h.store.meta(snapshotId);
    if (meta.network !== (spec.network === true)) return;
    const entry = this.take(snapshotId);
    if (entry === undefined) return;
    try {
      await h.rename(entry.containerId, claimedName(spec.id, spec.tenant));
    } catch (err) {
      h.log.warn({ err: (err as Error).message }, 'template pool: claim failed, restoring a container');
      await h.remove(entry.containerId).catch(() => undefined);
      return;
    }
    return { ...entry, restored: { marks: async () => meta.marks } };
  }

  /** Looks every template up again and fills what is short (a memory snapshot was just taken, say). */
  refill(): void {
    for (const pool of this.#pools) {
      if (this.#closed) continue;
      if (pool.filling !== undefined) {
        pool.again = true;
        continue;
      }
      pool.filling = this.#fill(pool)
        .catch((err: unknown) =>
          this.#host.log.warn({ template: pool.name, err: (err as Error).message }, 'template pool: cannot fill'),
        )
        .finally(() => {
          pool.filling = undefined;
          if (pool.again) {
            pool.again = false;
            this.refill();
          }
        });
    }
  }

  async #fill(pool: Pool): Promise<void> {
    const found = await this.#resolve(pool.name);
    const id = found === pool.released ? undefined : found;
    if (id !== pool.snapshotId) {
      pool.snapshotId = id;
      await this.#removeAll(pool.ready.splice(0));
    }
    while (id !== undefined && !this.#closed && pool.snapshotId === id && pool.ready.length < pool.size) {
      const entry = await this.#create(id);
      if (this.#closed || pool.snapshotId !== id) {
        await this.#host.remove(entry.containerId).catch(() => undefined);
        return;
      }
      pool.ready.push(entry);
    }
  }

  async #removeAll(entries: PoolEntry[]): Promise<void> {
    await Promise.all(entries.map((e) => this.#host.remove(e.containerId).catch(() => undefined)));
  }

  /** A ready container restored from `snapshotId` (and a refill), or undefined. */
  take(snapshotId: string): PoolEntry | undefined {
    const pool = this.#pools.find((p) => p.snapshotId === snapshotId && p.ready.length > 0);
    const entry = pool?.ready.shift();
    if (entry !== undefined) this.refill();
    return entry;
  }

  /** Containers ready now, of one template (by its configured name) or of all. */
  readyContainers(name?: string): string[] {
    return this.#pools
      .filter((p) => name === undefined || p.name === name)
      .flatMap((p) => p.ready.map((e) => e.containerId));
  }

  /** Each pool's ready containers, and its size once its template is found (`/metrics`). */
  reports(): WarmPoolReport[] {
    return this.#pools.map((p) => ({
      pool: `template:${p.name}`,
      ready: p.ready.length,
      target: p.snapshotId === undefined ? 0 : p.size,
    }));
  }

  /** A container vanished (events): dropped if it was waiting here. */
  forget(containerId: string): void {
    for (const pool of this.#pools) {
      const i = pool.ready.findIndex((e) => e.containerId === containerId);
      if (i >= 0) pool.ready.splice(i, 1);
    }
  }

  /**
   * Runs `remove` (the deletion of snapshot `snapshotId`, as `tenant` may name it) once the
   * containers of its pool are gone: the engine refuses to delete an image containers use. The
   * pool is not filled from it again unless the deletion failed.
   */
  async whileReleased<T>(snapshotId: string, tenant: TenantId | undefined, remove: () => Promise<T>): Promise<T> {
    const h = this.#host;
    if (this.#pools.length === 0 && h.options.fleet === undefined) return remove();
    const id = (await findSnapshot(h.docker, snapshotId, tenant, h.options.engineTimeoutMs)).snapshotId;
    await this.#release(id);
    // In a fleet the other replicas' pools may hold containers of the template too.
    if (h.options.fleet !== undefined) await this.#removeUnclaimed(id);
    try {
      return await remove();
    } catch (err) {
      await this.#release(id, true);
      throw err;
    }
  }

  /**
   * Removes the instance's pool containers of `snapshotId` that no session claimed (another
   * replica's pool: it forgets them on the engine's event). By name, so that one claimed (renamed)
   * meanwhile stays; the deletion then fails as for any image in use.
   */
  async #removeUnclaimed(snapshotId: string): Promise<void> {
    const h = this.#host;
    const list = await withDeadline('container list', h.options.engineTimeoutMs, (abortSignal) =>
      h.docker.listContainers({
        all: true,
        filters: { label: [`${LABEL.instance}=${h.options.instanceId}`, `${LABEL.pool}=true`] },
        abortSignal,
      }),
    );
    const names = list
      .filter((c) => c.ImageID === snapshotId)
      .map((c) => c.Names?.[0]?.replace(/^\//, '') ?? '')
      .filter((n) => n.startsWith(POOL_NAME_PREFIX));
    await Promise.all(names.map((n) => h.remove(n).catch(() => undefined)));
  }

  async #release(snapshotId: string, keep = false): Promise<void> {
    for (const pool of this.#pools) {
      if (keep) {
        if (pool.released === snapshotId) pool.released = undefined;
        continue;
      }
      // A pool still looking its template up may be about to find this one.
      if (pool.snapshotId !== snapshotId && pool.snapshotId !== undefined) continue;
      pool.released = snapshotId;
      pool.snapshotId = undefined;
      await pool.filling;
      await this.#removeAll(pool.ready.splice(0));
    }
    if (keep) this.refill();
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#timer);
    await Promise.all(this.#pools.map((p) => p.filling));
    await this.#removeAll(this.#pools.flatMap((p) => p.ready.splice(0)));
  }
}

/**
 * Whether a session may take a container of a template pool: made like one (default resources
 * and workdir, no labels; the runtime and the network, the template's, are compared apart).
 */
function templatePoolMatches(spec: BackendSessionSpec, o: ResolvedDockerOptions): boolean {
  const d = o.defaultResources;
  return (
    (spec.workdir ?? o.defaultWorkdir) === o.defaultWorkdir &&
    Object.keys(spec.labels).length === 0 &&
    spec.resources.memoryMb === d.memoryMb &&
    spec.resources.cpus === d.cpus &&
    spec.resources.pids === d.pids &&
    (spec.resources.diskMb ?? d.diskMb) === d.diskMb
  );
}
