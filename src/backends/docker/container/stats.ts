/**
 * A session container's resource use from the engine's stats endpoint, one sample
 * (`stream=false&one-shot=true`: the engine answers at once instead of waiting a second for a
 * second sample; rates are computed by the caller from two of our samples).
 */
import type Docker from 'dockerode';
import type { SessionStats } from '../../types.ts';
import { withDeadline } from '../engine/engine-client.ts';

/** The fields of the engine's stats answer that we read (cgroup v1 and v2 alike). */
interface EngineStats {
  readonly cpu_stats?: { readonly cpu_usage?: { readonly total_usage?: number } };
  readonly memory_stats?: {
    readonly usage?: number;
    readonly limit?: number;
    readonly stats?: Readonly<Record<string, number>>;
  };
  readonly pids_stats?: { readonly current?: number; readonly limit?: number };
}

const finite = (n: unknown): number | undefined =>
  typeof n === 'number' && Number.isFinite(n) && n >= 0 ? n : undefined;

/**
 * Memory as `docker stats` shows it: usage less the page cache the kernel can drop at once
 * (`inactive_file` on cgroup v2, `total_inactive_file` on v1).
 */
function memoryInUse(m: EngineStats['memory_stats']): number {
  const usage = finite(m?.usage) ?? 0;
  const cache = finite(m?.stats?.['inactive_file']) ?? finite(m?.stats?.['total_inactive_file']) ?? 0;
  return cache < usage ? usage - cache : usage;
}

/** Reads one stats sample of `container`; EXEC_ERR_BACKEND_UNAVAILABLE after `timeoutMs`. */
export async function containerStats(container: Docker.Container, timeoutMs: number): Promise<SessionStats> {
  const options = { stream: false, 'one-shot': true } as { stream: false };
  const raw = (await withDeadline('container stats', timeoutMs, (abortSignal) =>
    container.stats({ ...options, abortSignal } as { stream: false }),
  )) as EngineStats;
  // A limit of 0, or the host's whole memory / max uint64, means "not limited".
  const limit = finite(raw.memory_stats?.limit);
  const pidsLimit = finite(raw.pids_stats?.limit);
  return {
    cpuNanos: finite(raw.cpu_stats?.cpu_usage?.total_usage) ?? 0,
    memoryBytes: memoryInUse(raw.memory_stats),
    memoryLimitBytes: limit !== undefined && limit > 0 && limit < Number.MAX_SAFE_INTEGER ? limit : undefined,
    pids: finite(raw.pids_stats?.current) ?? 0,
    pidsLimit: pidsLimit !== undefined && pidsLimit > 0 && pidsLimit < Number.MAX_SAFE_INTEGER ? pidsLimit : undefined,
  };
}
