/**
 * Hibernation and gVisor, measured side by side in one run against the local engine (runsc
 * registered, experimental mode; see docs/docker-backend.md):
 *   hibernate / wake of an idle runsc session, and of one whose process holds 256 MB
 *     (`hibernate()` until the container is stopped with its checkpoint; `wake()` until it
 *     runs again), p50 and p90 over N rounds each;
 *   exec round trip (spawn of `true` to its exit, pipe mode) in a runsc and a runc session,
 *     interleaved, and their ratio, on the agent path and on the exec path.
 * Usage: node --import tsx bench/hibernate.ts [rounds=10] [execs=30]
 */
import { randomUUID } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { createDockerBackend } from '../src/backends/docker/index.ts';
import type { BackendSession, ProcessSink } from '../src/backends/types.ts';
import { asSessionId, asTenantId } from '../src/ids.ts';
import { silentLogger } from '../src/logger.ts';
import { spawnRequest } from '../test/docker/helpers.ts';

const rounds = Number(process.argv[2] ?? 10);
const execs = Number(process.argv[3] ?? 30);
const IMAGE = process.env.EXEC_SERVER_TEST_IMAGE ?? 'exec-server-test:latest';

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

const fmt = (v: number): string => v.toFixed(1).padStart(8);

async function run(s: BackendSession, argv: string[]): Promise<{ ms: number; out: string; code: number }> {
  let out = '';
  let done!: (code: number) => void;
  const exited = new Promise<number>((r) => (done = r));
  const sink: ProcessSink = {
    output: (_s, d) => {
      out += d.toString('utf8');
    },
    exit: (e) => done(e.kind === 'exited' ? e.code : -1),
  };
  const t0 = performance.now();
  await s.spawn(spawnRequest(argv), sink);
  const code = await exited;
  return { ms: performance.now() - t0, out, code };
}

const make = (execPath: 'agent' | 'exec'): ReturnType<typeof createDockerBackend> =>
  createDockerBackend(
    {
      defaultImage: IMAGE,
      instanceId: `bench-hibernate-${randomUUID().slice(0, 8)}`,
      allowedRuntimes: ['runsc'],
      defaultResources: { memoryMb: 1024, cpus: 1, pids: 512 },
      execPath,
    },
    process.env.BENCH_DEBUG
      ? { info: console.error, warn: console.error, error: console.error, debug: console.error }
      : silentLogger,
  );
process.on('exit', (code) => {
  if (code !== 0) console.error(`bench exits with ${code}`);
});
const backend = make('agent');
const execBackend = make('exec');
const spec = (runtime: string): Parameters<typeof backend.createSession>[0] => ({
  id: asSessionId(randomUUID()),
  tenant: asTenantId('bench'),
  labels: {},
  resources: { memoryMb: 1024, cpus: 1, pids: 512 },
  network: false,
  runtime,
});

function rss(containerId: string): string {
  // The sandbox's memory as the host sees it (cgroup v1 or v2), while it runs.
  const script = `cat /sys/fs/cgroup/memory/docker/${containerId}/memory.usage_in_bytes 2>/dev/null || cat /sys/fs/cgroup/system.slice/docker-${containerId}.scope/memory.current 2>/dev/null || echo ?`;
  const v = execFileSync('sh', ['-c', script]).toString().trim();
  return /^\d+$/.test(v) ? `${(Number(v) / 1048576).toFixed(0)} MB` : 'unknown';
}

async function cycle(s: BackendSession, label: string): Promise<void> {
  const h = s.hibernation!;
  const hib: number[] = [];
  const wake: number[] = [];
  console.log(`# ${label}: host cgroup memory while awake ${rss(s.containerId!)}`);
  for (let i = 0; i < rounds; i++) {
    try {
      let t0 = performance.now();
      await h.hibernate();
      hib.push(performance.now() - t0);
      t0 = performance.now();
      await h.wake();
      wake.push(performance.now() - t0);
    } catch (err) {
      // Reported, not hidden: the round's failure is part of the result.
      console.log(`# ${label}: round ${i + 1} failed: ${(err as Error).message}`);
      return;
    }
  }
  console.log(
    `${label.padEnd(28)} hibernate p50 ${fmt(percentile(hib, 50))} ms  p90 ${fmt(percentile(hib, 90))} ms | wake p50 ${fmt(percentile(wake, 50))} ms  p90 ${fmt(percentile(wake, 90))} ms`,
  );
}

// Idle agent connections do not hold the event loop (a server's listener does); this bench has none.
const keepAlive = setInterval(() => undefined, 1000);
try {
  const idle = await backend.createSession(spec('runsc'));
  const big = await backend.createSession(spec('runsc'));
  // 256 MB held by a detached process (a checkpoint may carry detached work, not attached execs).
  const held = await run(big, [
    'sh',
    '-c',
    'setsid awk \'BEGIN { s = sprintf("%268435456s", ""); while (1) system("sleep 3600") }\' </dev/null >/dev/null 2>&1 & echo $! >/tmp/holder.pid; sleep 3; grep VmRSS /proc/$!/status',
  ]);
  console.log(`# memory holder: ${held.out.trim()}`);
  await cycle(idle, 'idle runsc session');
  await cycle(big, 'runsc session holding ~256 MB');
  const after = await run(big, [
    'sh',
    '-c',
    'kill -0 "$(cat /tmp/holder.pid)" 2>/dev/null && grep VmRSS "/proc/$(cat /tmp/holder.pid)/status"',
  ]);
  console.log(
    `# after ${rounds} rounds: ${after.out.trim() ? `holder still running, ${after.out.trim()}` : 'holder gone'}`,
  );

  for (const [path, b] of [
    ['agent', backend],
    ['exec', execBackend],
  ] as const) {
    const gvisor = await b.createSession(spec('runsc'));
    const plain = await b.createSession(spec('runc'));
    const times: Record<string, number[]> = { runsc: [], runc: [] };
    for (let i = 0; i < 3; i++) {
      await run(gvisor, ['true']);
      await run(plain, ['true']);
    }
    for (let i = 0; i < execs; i++) {
      times['runsc']!.push((await run(gvisor, ['true'])).ms);
      times['runc']!.push((await run(plain, ['true'])).ms);
    }
    const p = (rt: string, q: number): number => percentile(times[rt]!, q);
    console.log(
      `round trip, ${`${path} path`.padEnd(16)} runc p50 ${fmt(p('runc', 50))} ms  p90 ${fmt(p('runc', 90))} ms | runsc p50 ${fmt(p('runsc', 50))} ms  p90 ${fmt(p('runsc', 90))} ms | runsc/runc p50 ${(p('runsc', 50) / p('runc', 50)).toFixed(2)}x`,
    );
  }
} finally {
  await backend.close();
  await execBackend.close();
  clearInterval(keepAlive);
}
