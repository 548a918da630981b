/**
 * The docker backend's warm pools, made, started, reported on and closed together: one pool of
 * pre-started containers per runtime asked for (`warmPoolSize` for the default one,
 * `warmPoolRuntimes`; container/warm-pool.ts), and the pools of containers restored from live
 * templates (`warmPoolTemplates`; checkpoints/template-pool.ts). Beside docker-backend.ts, which
 * starts them with its events watcher, shares them with its creation pipeline and recovery, and
 * hands this what it uses.
 */
import type { WarmPoolReport } from '../types.ts';
import { type TemplatePoolHost, TemplatePools } from './checkpoints/template-pool.ts';
import type { CreateGate } from './container/create-gate.ts';
import type { ProvisionInput } from './container/provision.ts';
import { type PoolEntry, WarmPool } from './container/warm-pool.ts';
import { withDeadline } from './engine/engine-client.ts';

/** What the warm pools use of the docker backend. */
export interface WarmPoolsHost
  extends Pick<TemplatePoolHost, 'docker' | 'options' | 'runtimes' | 'store' | 'log' | 'listSnapshots'> {
  /** The engine's create gate: refills run as its background work. */
  readonly gate: CreateGate;
  /** One container for the warm pool of `runtime` (session-factory.ts). */
  createPoolEntry(runtime: string): Promise<PoolEntry>;
  /** Makes a container of this server's, its own labels added (session-factory.ts). */
  provision(p: ProvisionInput): Promise<PoolEntry>;
  removeContainer(containerId: string): Promise<void>;
}

/** Every warm pool of one engine's backend. */
export class WarmPools {
  /** One pool per runtime, once started: the creation pipeline takes from them, recovery forgets in them. */
  readonly byRuntime = new Map<string, WarmPool>();
  /** Pools of containers restored from live templates, asked first for a snapshot's session. */
  readonly templates: TemplatePools;
  readonly #host: WarmPoolsHost;
  #started: Promise<void> | undefined;
  #closed = false;

  constructor(host: WarmPoolsHost) {
    this.#host = host;
    const { docker, options, runtimes, store, log } = host;
    this.templates = new TemplatePools(options.warmPoolTemplates, {
      ...{ docker, options, runtimes, store, log },
      listSnapshots: () => host.listSnapshots(),
      provision: (p) => host.gate.run('background', () => host.provision(p)),
      remove: (id) => host.removeContainer(id),
      rename: (id, name) =>
        withDeadline('container rename', options.engineTimeoutMs, (abortSignal) =>
          docker.getContainer(id).rename({ name, abortSignal }),
        ),
    });
  }

  /** Starts filling every pool (once: the backend's start); a pool that cannot start is logged, and not kept. */
  start(): void {
    this.templates
      .start()
      .catch((err: unknown) => this.#host.log.warn({ err: (err as Error).message }, 'no template pool'));
    this.#started = this.#startRuntimes().catch((err: unknown) =>
      this.#host.log.warn({ err: (err as Error).message }, 'warm pool: cannot resolve the runtimes; no pool'),
    );
  }

  async #startRuntimes(): Promise<void> {
    const o = this.#host.options;
    const sizes = new Map<string, { min: number; max: number }>([
      [await this.#host.runtimes.defaultRuntime(), { min: o.warmPoolSize, max: o.warmPoolMax }],
      ...Object.entries(o.warmPoolRuntimes).map(
        ([r, n]) => [r, { min: n, max: n <= 0 ? 0 : Math.max(n, o.warmPoolMax) }] as const,
      ),
    ]);
    for (const [runtime, size] of sizes) {
      if (size.max <= 0 || this.#closed) continue;
      await this.#host.runtimes.resolve(runtime);
      const pool = new WarmPool({
        sizing: { ...size, idleMs: o.warmPoolIdleMs },
        create: () => this.#host.createPoolEntry(runtime),
        remove: (id) => this.#host.removeContainer(id),
        gate: this.#host.gate,
        log: this.#host.log,
      });
      this.byRuntime.set(runtime, pool);
      pool.refill();
    }
  }

  /** Containers ready in the pool of `runtime`, or in all. */
  ready(runtime?: string): number {
    if (runtime !== undefined) return this.byRuntime.get(runtime)?.readyCount ?? 0;
    let n = 0;
    for (const pool of this.byRuntime.values()) n += pool.readyCount;
    return n;
  }

  /** What the pool of `runtime` (or all) holds, aims at and is creating. */
  state(runtime?: string): { ready: number; target: number; creating: number } {
    const pools = runtime === undefined ? [...this.byRuntime.values()] : [this.byRuntime.get(runtime)];
    const state = { ready: 0, target: 0, creating: 0 };
    for (const p of pools) {
      state.ready += p?.readyCount ?? 0;
      state.target += p?.target ?? 0;
      state.creating += p?.creating ?? 0;
    }
    return state;
  }

  /** Every pool, a runtime's or a live template's, with what it holds and aims at. */
  reports(): WarmPoolReport[] {
    const runtimes = [...this.byRuntime].map(([pool, p]) => ({ pool, ready: p.readyCount, target: p.target }));
    return [...runtimes, ...this.templates.reports()];
  }

  /** Whether every runtime's pool is full within `timeoutMs` (waiting for them to start first). */
  async whenFull(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    await this.#started;
    const full = await Promise.all(
      [...this.byRuntime.values()].map((p) => p.whenFull(Math.max(0, deadline - Date.now()))),
    );
    return full.every(Boolean);
  }

  /** Stops every pool and removes what they hold (after the runtimes' pools have started, if they were). */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#started;
    await Promise.all([...this.byRuntime.values(), this.templates].map((p) => p.close()));
  }
}
