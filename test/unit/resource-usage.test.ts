/** Live resource use (src/sessions/resource-usage.ts) from a fake backend's counters: rates, sharing, failures. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SessionStats } from '../../src/backends/types.ts';
import { UsageSampler } from '../../src/sessions/resource-usage.ts';

function session(samples: Array<SessionStats | Error>, status = 'running') {
  const state = { calls: 0 };
  const backend = {
    stats: async () => {
      const next = samples[Math.min(state.calls++, samples.length - 1)];
      if (next instanceof Error) throw next;
      return next as SessionStats;
    },
  };
  return { state, s: { backend, status: { status } } as unknown as ConstructorParameters<typeof UsageSampler>[0] };
}
const stats = (cpuNanos: number, over: Partial<SessionStats> = {}): SessionStats => ({
  cpuNanos,
  memoryBytes: 1000.4,
  pids: 3,
  ...over,
});

test('the first sample has no rate; the next one a CPU percent from the difference', async () => {
  const { s } = session([stats(2e9, { memoryLimitBytes: 4096, pidsLimit: 64 }), stats(2e9 + 3e8)]);
  const sampler = new UsageSampler(s);
  const first = await sampler.sample();
  assert.deepEqual(
    { ...first, sampledAt: undefined },
    {
      cpuPercent: null,
      cpuSeconds: 2,
      memoryBytes: 1000,
      memoryLimitBytes: 4096,
      pids: 3,
      pidsLimit: 64,
      sampledAt: undefined,
    },
  );
  await sleep(300);
  const second = await sampler.sample();
  assert.ok(second && second.cpuPercent !== null);
  // 0.3 CPU-seconds over at least 0.3 s of wall time: above 0, at most 100 %.
  assert.ok(second.cpuPercent > 0 && second.cpuPercent <= 100, String(second.cpuPercent));
  assert.deepEqual([second.memoryLimitBytes, second.pidsLimit], [null, null]);
});

test('callers at once share one backend call, and a fresh sample is reused', async () => {
  const { s, state } = session([stats(1e9)]);
  const sampler = new UsageSampler(s);
  const [a, b] = await Promise.all([sampler.sample(), sampler.sample()]);
  assert.equal(a, b);
  assert.equal(await sampler.sample(), a);
  assert.equal(state.calls, 1);
});

test('a counter that went down makes no negative rate', async () => {
  const { s } = session([stats(5e9), stats(1e9)]);
  const sampler = new UsageSampler(s);
  await sampler.sample();
  await sleep(300);
  assert.equal((await sampler.sample())?.cpuPercent, 0);
});

test('null when the backend cannot tell: no stats, a dead session, or a failed sample', async () => {
  const noStats = { backend: {}, status: { status: 'running' } } as unknown as ConstructorParameters<
    typeof UsageSampler
  >[0];
  assert.equal(await new UsageSampler(noStats).sample(), null);
  assert.equal(await new UsageSampler(session([stats(1)], 'dead').s).sample(), null);
  const failing = session([new Error('engine gone'), stats(1)]);
  const sampler = new UsageSampler(failing.s);
  assert.equal(await sampler.sample(), null);
  assert.equal((await sampler.sample())?.pids, 3, 'the next call asks again');
});
