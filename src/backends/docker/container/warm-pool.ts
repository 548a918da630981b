/**
 * Pre-started containers of the default image and policy (no network, default resources,
 * default workdir), so a matching `createSession` skips create + start + setup. Pool
 * containers carry the `exec-server.pool=true` and instance labels, so recovery and reaping
 * treat them like any other; since labels cannot change after creation, a taken container is
 * renamed to carry its session (see `claimedName`).
 */
import type { AgentChannel } from '../agent/agent-channel.ts';
import type { DockerLogger } from '../options.ts';

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

export class WarmPool {
  readonly #size: number;
  readonly #create: () => Promise<PoolEntry>;
  readonly #remove: (containerId: string) => Promise<void>;
  readonly #log: DockerLogger;
  readonly #ready: PoolEntry[] = [];
  #filling: Promise<void> | undefined;
  #closed = false;
  #retryTimer: NodeJS.Timeout | undefined;

  constructor(
    size: number,
    create: () => Promise<PoolEntry>,
    remove: (containerId: string) => Promise<void>,
    log: DockerLogger,
  ) {
    this.#size = size;
    this.#create = create;
    this.#remove = remove;
    this.#log = log;
  }

  get readyCount(): number {
    return this.#ready.length;
  }

  /** Takes a ready container (and starts a refill), or undefined when none is ready. */
  take(): PoolEntry | undefined {
    const entry = this.#ready.shift();
    this.refill();
    return entry;
  }

  /** Fills the pool up to its size in the background, one container at a time. */
  refill(): void {
    if (this.#closed || this.#filling !== undefined || this.#size === 0) return;
    this.#filling = (async () => {
      try {
        while (!this.#closed && this.#ready.length < this.#size) {
          const entry = await this.#create();
          if (this.#closed) {
            await this.#remove(entry.containerId).catch(() => undefined);
            return;
          }
          this.#ready.push(entry);
        }
      } catch (err) {
        // Engine down or image missing: try again later rather than spin.
        this.#log.warn({ err: (err as Error).message }, 'warm pool: cannot start a container; retrying in 5 s');
        clearTimeout(this.#retryTimer);
        this.#retryTimer = setTimeout(() => this.refill(), 5000);
        this.#retryTimer.unref();
      } finally {
        this.#filling = undefined;
      }
    })();
  }

  /** Resolves once the pool is full (tests, startup), or after `timeoutMs`. */
  async whenFull(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (this.#ready.length < this.#size && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    return this.#ready.length >= this.#size;
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
    clearTimeout(this.#retryTimer);
    // A container being created right now is removed by the fill loop itself once it sees #closed.
    await this.#filling;
    const entries = this.#ready.splice(0);
    await Promise.all(entries.map((e) => this.#remove(e.containerId).catch(() => undefined)));
  }
}
