/**
 * Pre-started containers of the default image and policy (no network, default resources,
 * default workdir), so a matching `createSession` skips create + start + setup. The pool sizes
 * itself from demand between a minimum and a maximum (pool-sizing.ts) and refills in the
 * background through the engine's create gate, below live creates (create-gate.ts). Pool
 * containers carry the `exec-server.pool=true` and instance labels, so recovery and reaping
 * treat them like any other; since labels cannot change after creation, a taken container is
 * renamed to carry its session (see `claimedName`).
 */
import type { AgentChannel } from '../agent/agent-channel.ts';
import type { DockerLogger } from '../options.ts';
import type { CreateGate } from './create-gate.ts';
import { PoolDemand, type PoolSizing, refillStep, shrinkStep } from './pool-sizing.ts';

/** A pre-started container of the pool, with what its session will need to know of it. */
export interface PoolEntry {
  readonly containerId: string;
  readonly shellPath: string;
  readonly baseEnv: Readonly<Record<string, string>>;
  /** The exec agent, attached at provision; undefined when the session uses one exec per command. */
  readonly agent?: AgentChannel | undefined;
  /** Why there is no agent (reported in the log and `session/info`). */
  readonly agentUnavailable?: string | undefined;
  /** Whether the engine limits the container's disk, or the server's watch must (disk.ts); default watch. */
  readonly diskEnforcement?: 'engine' | 'watch' | undefined;
}

/** Names of pool containers not taken yet (default image and template pools): this, then a UUID. */
export const POOL_NAME_PREFIX = 'exec-server-pool-';

/** Name of a pool container once it belongs to a session: `exs.<sessionId>.<hex tenant>`. */
export function claimedName(sessionId: string, tenant: string): string {
  return `exs.${sessionId}.${Buffer.from(tenant, 'utf8').toString('hex')}`;
}

/** Reverses `claimedName` (docker reports names with a leading slash). */
export function parseClaimedName(name: string): { sessionId: string; tenant: string } | undefined {
  const m = /^\/?exs\.([A-Za-z0-9-]+)\.([0-9a-f]*)$/.exec(name);
  if (m === null) return undefined;
  return { sessionId: m[1]!, tenant: Buffer.from(m[2]!, 'hex').toString('utf8') };
}

/** How often a pool looks at its size (refill after a failure, shrink when idle). */
const TICK_MS = 1000;
/** Wait after a failed create before the next one (engine down, image missing). */
const RETRY_MS = 5000;

/** How a warm pool sizes itself, and makes and removes its containers. */
export interface WarmPoolInput {
  readonly sizing: PoolSizing;
  readonly create: () => Promise<PoolEntry>;
  readonly remove: (containerId: string) => Promise<void>;
  /** The engine's create gate: refills run as its background work. */
  readonly gate: CreateGate;
  readonly log: DockerLogger;
  /** Refills one pool runs at once (within the gate's background share). Default 4. */
  readonly parallel?: number | undefined;
  /** The clock (tests). */
  readonly now?: (() => number) | undefined;
}

/** Pre-started containers of the default image, sized from demand and refilled in the background. */
export class WarmPool {
  readonly #in: WarmPoolInput;
  readonly #demand: PoolDemand;
  readonly #now: () => number;
  readonly #ready: PoolEntry[] = [];
  readonly #creating = new Set<Promise<void>>();
  #retryAt = 0;
  #closed = false;
  readonly #timer: NodeJS.Timeout;

  constructor(input: WarmPoolInput) {
    this.#in = input;
    this.#demand = new PoolDemand(input.sizing);
    this.#now = input.now ?? Date.now;
    this.#timer = setInterval(() => this.#tick(), TICK_MS);
    this.#timer.unref();
  }

  get readyCount(): number {
    return this.#ready.length;
  }

  /** Containers the pool wants ready now (its minimum, or more after demand). */
  get target(): number {
    return this.#demand.target(this.#now());
  }

  /** Creates of the pool under way. */
  get creating(): number {
    return this.#creating.size;
  }

  /** `n` sessions the pool could serve were asked for (sizes the pool for the next such burst). */
  noteDemand(n = 1): void {
    this.#demand.record(this.#now(), n);
    this.refill();
  }

  /** Takes a ready container (and starts a refill), or undefined when none is ready. */
  take(): PoolEntry | undefined {
    const entry = this.#ready.shift();
    this.refill();
    return entry;
  }

  /** Starts the creates the pool lacks (in the background, below live creates). */
  refill(): void {
    if (this.#closed || this.#now() < this.#retryAt) return;
    const n = refillStep(this.#ready.length, this.#creating.size, this.target, this.#in.parallel ?? 4);
    for (let i = 0; i < n; i++) this.#startOne();
  }

  #startOne(): void {
    const done: Promise<void> = this.#in.gate
      .run('background', async () => {
        // Waited behind live work: the pool may be full (or closed) by now.
        if (this.#closed || this.#ready.length >= this.target) return;
        const entry = await this.#in.create();
        if (this.#closed) await this.#in.remove(entry.containerId).catch(() => undefined);
        else this.#ready.push(entry);
      })
      .catch((err: unknown) => {
        this.#retryAt = this.#now() + RETRY_MS;
        this.#in.log.warn({ err: (err as Error).message }, 'warm pool: cannot start a container; retrying in 5 s');
      })
      .finally(() => {
        this.#creating.delete(done);
        this.refill();
      });
    this.#creating.add(done);
  }

  #tick(): void {
    if (this.#closed) return;
    const now = this.#now();
    const surplus = shrinkStep(this.#ready.length, this.#demand.target(now));
    // The oldest first: the newest ones have been waiting the least.
    for (const e of this.#ready.splice(0, surplus))
      this.#in
        .remove(e.containerId)
        .catch((err: unknown) =>
          this.#in.log.warn({ err: (err as Error).message }, 'warm pool: cannot remove a surplus container'),
        );
    this.refill();
  }

  /** Resolves once the pool holds its target (tests, startup), or after `timeoutMs`. */
  async whenFull(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (this.#ready.length < this.target && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    return this.#ready.length >= this.target;
  }

  /** A container vanished (events): drop it if it was waiting in the pool. */
  forget(containerId: string): void {
    const i = this.#ready.findIndex((e) => e.containerId === containerId);
    if (i >= 0) {
      this.#ready.splice(i, 1);
      this.refill();
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#timer);
    // A container being created right now is removed by its create once it sees #closed.
    await Promise.all([...this.#creating]);
    const entries = this.#ready.splice(0);
    await Promise.all(entries.map((e) => this.#in.remove(e.containerId).catch(() => undefined)));
  }
}
