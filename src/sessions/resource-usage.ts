/**
 * Live resource use of a session (`session/info`, `GET /v1/sessions/:id`, the console): the
 * backend's counters (`BackendSession.stats`) turned into a CPU rate from the previous sample.
 * Callers that ask at once share one sample, so polling clients cost one backend call.
 */
import type { SessionStats } from '../backends/types.ts';
import type { ResourceUsage } from '../protocol/index.ts';
import type { SessionCore } from './session-view.ts';

/** A sample younger than this answers again instead of asking the backend (and makes no noisy rate). */
const REUSE_MS = 250;

interface Sample {
  readonly stats: SessionStats;
  readonly atMs: number;
  readonly usage: ResourceUsage;
}

function toUsage(stats: SessionStats, atMs: number, previous: Sample | undefined): ResourceUsage {
  const wallNanos = previous ? (atMs - previous.atMs) * 1e6 : 0;
  // Local counters follow the live trees and may drop when a command ends: no negative rates.
  const cpuPercent =
    previous && wallNanos > 0 ? Math.max(0, ((stats.cpuNanos - previous.stats.cpuNanos) / wallNanos) * 100) : null;
  return {
    cpuPercent: cpuPercent === null ? null : Math.round(cpuPercent * 10) / 10,
    cpuSeconds: Math.round(stats.cpuNanos / 1e6) / 1000,
    memoryBytes: Math.round(stats.memoryBytes),
    memoryLimitBytes: stats.memoryLimitBytes ?? null,
    pids: stats.pids,
    pidsLimit: stats.pidsLimit ?? null,
    sampledAt: new Date(atMs).toISOString(),
  };
}

/** The resource use of one session, sampled on demand (the session owns one: `Session.usage`). */
export class UsageSampler {
  readonly #session: Pick<SessionCore, 'backend' | 'status'>;
  #last: Sample | undefined;
  #inflight: Promise<ResourceUsage | null> | undefined;

  constructor(session: Pick<SessionCore, 'backend' | 'status'>) {
    this.#session = session;
  }

  /**
   * The session's resource use now; null when its backend cannot tell (no `stats`, the session
   * is dead, or the sample failed: resource use is information, never a reason for a call to fail).
   */
  sample(): Promise<ResourceUsage | null> {
    const { backend, status } = this.#session;
    const stats = backend.stats;
    if (stats === undefined || status.status === 'dead') return Promise.resolve(null);
    const previous = this.#last;
    if (previous && Date.now() - previous.atMs < REUSE_MS) return Promise.resolve(previous.usage);
    if (this.#inflight) return this.#inflight;
    const run = (async (): Promise<ResourceUsage | null> => {
      try {
        const sample = await stats.call(backend);
        const atMs = Date.now();
        const usage = toUsage(sample, atMs, previous);
        this.#last = { stats: sample, atMs, usage };
        return usage;
      } catch {
        return null;
      } finally {
        this.#inflight = undefined;
      }
    })();
    this.#inflight = run;
    return run;
  }
}
