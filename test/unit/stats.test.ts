/** A container's resource sample (src/backends/docker/container/stats.ts) read from the engine's answer, cgroup v1 and v2. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type Docker from 'dockerode';
import { containerStats } from '../../src/backends/docker/container/stats.ts';

const container = (answer: unknown, seen: unknown[] = []) =>
  ({
    stats: async (opts: unknown) => {
      seen.push(opts);
      return answer;
    },
  }) as unknown as Docker.Container;

test('one sample at once (one-shot), memory less the droppable cache, limits when set', async () => {
  const seen: unknown[] = [];
  const s = await containerStats(
    container(
      {
        cpu_stats: { cpu_usage: { total_usage: 5e9 } },
        memory_stats: { usage: 300, limit: 1024, stats: { inactive_file: 100 } },
        pids_stats: { current: 7, limit: 64 },
      },
      seen,
    ),
    1000,
  );
  assert.deepEqual(s, { cpuNanos: 5e9, memoryBytes: 200, memoryLimitBytes: 1024, pids: 7, pidsLimit: 64 });
  assert.equal((seen[0] as { stream: boolean; 'one-shot': boolean }).stream, false);
  assert.equal((seen[0] as { 'one-shot': boolean })['one-shot'], true);
});

test('cgroup v1 cache name; no limit when 0 or unbounded; missing fields read as zero', async () => {
  const v1 = await containerStats(
    container({
      memory_stats: { usage: 500, limit: 2 ** 63, stats: { total_inactive_file: 50 } },
      pids_stats: { current: 1, limit: 0 },
    }),
    1000,
  );
  assert.deepEqual(v1, { cpuNanos: 0, memoryBytes: 450, memoryLimitBytes: undefined, pids: 1, pidsLimit: undefined });
  const empty = await containerStats(container({}), 1000);
  assert.deepEqual(empty, { cpuNanos: 0, memoryBytes: 0, memoryLimitBytes: undefined, pids: 0, pidsLimit: undefined });
  const odd = await containerStats(container({ memory_stats: { usage: 10, stats: { inactive_file: 99 } } }), 1000);
  assert.equal(odd.memoryBytes, 10, 'a cache larger than the usage is not subtracted');
});

test('an engine that does not answer in time is unavailable', async () => {
  const stuck = { stats: () => new Promise(() => {}) } as unknown as Docker.Container;
  await assert.rejects(containerStats(stuck, 20), { code: 'EXEC_ERR_BACKEND_UNAVAILABLE', message: /within 20 ms/ });
});
