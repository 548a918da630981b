/**
 * How long after a denied process exits does `process/exited` (with `sandboxDenied`) reach the
 * client? Measured side by side in one run:
 *   raw     spawn of the same bubblewrap-sandboxed command with child_process, start -> exit
 *   denied  process/start -> process/exited {sandboxDenied:true} over a real WebSocket
 *   allowed process/start -> process/exited of the same sandbox running `true` (no denial)
 * `denied` against `allowed` is the server's cost of the denial path (classification, gate,
 * publication); it does not wait out the 150 ms window. `raw` starts a fresh bwrap each time;
 * the server joins a kept-warm sandbox (warm-sandbox.ts), so it can be below `raw`.
 * Usage: node --import tsx bench/denial-latency.ts [runs=100]
 */
import { spawn } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bubblewrapArgs, DenyPlaceholders } from '../src/backends/local/bubblewrap.ts';
import { startServer, TestSession } from '../test/support/harness.ts';

const runs = Number(process.argv[2] ?? 100);
const DENIED = ['sh', '-c', 'echo x > /var/tmp/exec-server-bench-probe'];

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

async function raw(workdir: string): Promise<number[]> {
  const state = await mkdtemp(join(tmpdir(), 'bench-state-'));
  const layout = {
    privateTmp: await mkdtemp(join(tmpdir(), 'bench-tmp-')),
    placeholders: await DenyPlaceholders.create(state),
  };
  const args = await bubblewrapArgs(
    { kind: 'restricted', writableRoots: [workdir, '/tmp'], denyRead: [], network: false },
    workdir,
    layout,
  );
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await new Promise<void>((resolve) =>
      spawn('bwrap', [...args, '--', ...DENIED], { stdio: 'ignore', detached: true }).once('exit', () => resolve()),
    );
    times.push(performance.now() - t0);
  }
  return times;
}

async function viaServer(s: TestSession, argv: string[], tag: string): Promise<{ times: number[]; denied: number }> {
  const times: number[] = [];
  let denied = 0;
  for (let i = 0; i < runs; i++) {
    const id = `${tag}-${i}`;
    const t0 = performance.now();
    await s.start(id, argv);
    await s.waitFor((all) => all.some((n) => n.method === 'process/exited' && n.params['processId'] === id), 10_000);
    times.push(performance.now() - t0);
    if (s.eventsOf(id).some((n) => n.method === 'process/exited' && n.params['sandboxDenied'] === true)) denied++;
  }
  return { times, denied };
}

const server = await startServer({ flags: ['--exited-retention-ms', '1000'] });
const s = await TestSession.open(server.url, { session: { approvalPolicy: 'on-request' } });
const info = await s.request<Record<string, unknown>>('session/info', {});
const workdir = String(info['workdir'] ?? (await mkdtemp(join(tmpdir(), 'bench-'))));
await viaServer(s, ['true'], 'warm');
const rawTimes = await raw(workdir);
const denied = await viaServer(s, DENIED, 'denied');
const allowed = await viaServer(s, ['true'], 'allowed');
await s.close();
await server.close();

const row = (name: string, t: number[]): string =>
  `| ${name} | ${percentile(t, 50).toFixed(2)} | ${percentile(t, 90).toFixed(2)} |`;
console.log(`denial latency, ${runs} runs each (ms)`);
console.log('| measurement | p50 | p90 |');
console.log('|---|---|---|');
console.log(row('raw bwrap spawn -> exit', rawTimes));
console.log(row('server: start -> exited (denied)', denied.times));
console.log(row('server: start -> exited (allowed, true)', allowed.times));
console.log(`denials reported: ${denied.denied}/${runs}`);
console.log(
  `denial path over an allowed start, p50: ${(percentile(denied.times, 50) - percentile(allowed.times, 50)).toFixed(2)} ms; server denied / raw fresh bwrap, p50: ${(percentile(denied.times, 50) / percentile(rawTimes, 50)).toFixed(2)}x`,
);
