/**
 * Warm pools filled from live templates (`--warm-pool-templates NAME=N`; docs/snapshots.md):
 * per template, N containers already restored from its checkpoint, their processes running, so
 * a session made from the template claims one at once instead of waiting for a restore. Kept
 * apart from the default image's pool (container/warm-pool.ts): a template pool follows its
 * template (looked up by name, again when a memory snapshot is taken and every few seconds),
 * and lets its containers go before the template is deleted.
 */
import type { BackendSessionSpec } from '../../types.ts';
import type { PoolEntry } from '../container/warm-pool.ts';
import type { DockerLogger, ResolvedDockerOptions } from '../options.ts';

/** How often a pool looks its template up again (made by another server, or replaced). */
const LOOKUP_INTERVAL_MS = 5000;

export interface TemplatePoolHost {
  /** The newest live template called `name` (a snapshot name or id) this engine can restore, or undefined. */
  resolve(name: string): Promise<string | undefined>;
  /** A new unclaimed container restored from `snapshotId`. */
  create(snapshotId: string): Promise<PoolEntry>;
  remove(containerId: string): Promise<void>;
  readonly log: DockerLogger;
}

interface Pool {
  readonly name: string;
  readonly size: number;
  /** The template it is filled from now (undefined: none found yet). */
  snapshotId: string | undefined;
  /** A template being deleted: not filled from again. */
  released: string | undefined;
  readonly ready: PoolEntry[];
  filling: Promise<void> | undefined;
}

export class TemplatePools {
  readonly #pools: Pool[];
  readonly #host: TemplatePoolHost;
  #closed = false;
  #timer: NodeJS.Timeout | undefined;

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
      }));
  }

  /** Starts filling, and looking the templates up again every few seconds. */
  start(): void {
    if (this.#closed || this.#pools.length === 0 || this.#timer !== undefined) return;
    this.#timer = setInterval(() => this.refill(), LOOKUP_INTERVAL_MS);
    this.#timer.unref();
    this.refill();
  }

  /** Looks every template up again and fills what is short (a memory snapshot was just taken, say). */
  refill(): void {
    for (const pool of this.#pools) {
      if (this.#closed || pool.filling !== undefined) continue;
      pool.filling = this.#fill(pool)
        .catch((err: unknown) =>
          this.#host.log.warn({ template: pool.name, err: (err as Error).message }, 'template pool: cannot fill'),
        )
        .finally(() => (pool.filling = undefined));
    }
  }

  async #fill(pool: Pool): Promise<void> {
    const found = await this.#host.resolve(pool.name);
    const id = found === pool.released ? undefined : found;
    if (id !== pool.snapshotId) {
      pool.snapshotId = id;
      await this.#removeAll(pool.ready.splice(0));
    }
    while (id !== undefined && !this.#closed && pool.snapshotId === id && pool.ready.length < pool.size) {
      const entry = await this.#host.create(id);
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

  /** A container vanished (events): dropped if it was waiting here. */
  forget(containerId: string): void {
    for (const pool of this.#pools) {
      const i = pool.ready.findIndex((e) => e.containerId === containerId);
      if (i >= 0) pool.ready.splice(i, 1);
    }
  }

  /**
   * The template `snapshotId` is to be deleted: its containers go (the engine refuses to delete
   * an image containers use) and it is not filled from again. `keep`: the deletion failed.
   */
  async release(snapshotId: string, keep = false): Promise<void> {
    for (const pool of this.#pools) {
      if (keep) {
        if (pool.released === snapshotId) pool.released = undefined;
        continue;
      }
      if (pool.snapshotId !== snapshotId) continue;
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
 * and workdir, no labels; the runtime and the network, the template's, are compared by the caller).
 */
export function templatePoolMatches(spec: BackendSessionSpec, workdir: string, o: ResolvedDockerOptions): boolean {
  const d = o.defaultResources;
  return (
    workdir === o.defaultWorkdir &&
    Object.keys(spec.labels).length === 0 &&
    spec.resources.memoryMb === d.memoryMb &&
    spec.resources.cpus === d.cpus &&
    spec.resources.pids === d.pids &&
    (spec.resources.diskMb ?? d.diskMb) === d.diskMb
  );
}
