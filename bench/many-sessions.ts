/**
 * Many idle docker sessions on one server (docs/benchmarks.md, "Many sessions"): the server as
 * production runs it (dist/, `npm run build:dist` first; the sources through tsx otherwise),
 * its resident memory idle, with N idle sessions (made by batch creates of 16), again after an
 * idle wait, and one `true` in every session at once (HTTP `exec_command`, or over WebSocket)
 * until all closed.
 *
 *   node --import tsx bench/many-sessions.ts [--sessions 1000] [--batch 16] [--idle-ms 60000]
 *     [--image exec-server-test:latest] [--src] [--via http|ws]
 *   `--via ws`: the commands go over one WebSocket client per session (attached before the clock
 *   starts), as an agent runs them; `http` (default): one `exec_command` request per session.
 *   A batch the server refuses ends the creation: the bench prints how many sessions were made
 *   and the server's answer (what broke first), then measures those.
 */
import { parseArgs } from 'node:util';
import { ExecServerClient } from '../src/client/index.ts';
import { fmt, loadAverage, pooled, rssMb, startServer, stopServer } from './scale-lib.ts';

const { values: args } = parseArgs({
  options: {
    sessions: { type: 'string', default: '1000' },
    batch: { type: 'string', default: '16' },
    'idle-ms': { type: 'string', default: '60000' },
    image: { type: 'string', default: 'exec-server-test:latest' },
    src: { type: 'boolean', default: false },
    via: { type: 'string', default: 'http' },
  },
});
const N = Number(args.sessions);
const BATCH = Number(args.batch);
const IDLE_MS = Number(args['idle-ms']);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const pct = (xs: number[], p: number): number =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))] ?? NaN;

console.log(`bench/many-sessions: ${new Date().toISOString()}, load average ${loadAverage()}`);
const limit = String(Math.max(N, 256));
const server = await startServer(
  args.image,
  [
    '--warm-pool',
    '0',
    '--max-sessions',
    limit,
    '--max-sessions-per-tenant',
    limit,
    // `--via ws` holds a WebSocket per session, all of one tenant.
    '--max-websockets-per-tenant',
    limit,
    '--max-connections',
    String(Number(limit) + 256),
    '--idle-timeout-seconds',
    '86400',
  ],
  { dist: !args.src },
);
const pid = server.child.pid;
const ids: string[] = [];
try {
  await sleep(10_000);
  const idle = rssMb(pid);
  console.log(`server idle: ${fmt(idle)} MB RSS`);
  const t = performance.now();
  const batches = Math.ceil(N / BATCH);
  for (let b = 0; b < batches; b++) {
    const count = Math.min(BATCH, N - b * BATCH);
    const res = await fetch(`${server.http}/v1/sessions?count=${count}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sandbox: { type: 'workspace-write' }, approvalPolicy: 'never' }),
    });
    if (res.status !== 201) {
      console.log(
        `creation stopped after ${ids.length} sessions: batch ${b} answered ${res.status}: ${await res.text()}`,
      );
      break;
    }
    ids.push(...((await res.json()) as { sessions: Array<{ sessionId: string }> }).sessions.map((s) => s.sessionId));
    if ((b + 1) % 8 === 0)
      console.log(`  ${ids.length} sessions, ${fmt((ids.length / (performance.now() - t)) * 1000, 2)} /s`);
  }
  const createS = (performance.now() - t) / 1000;
  const made = ids.length;
  await sleep(10_000);
  const withN = rssMb(pid);
  await sleep(IDLE_MS);
  const later = rssMb(pid);
  const times: number[] = [];
  const clients =
    args.via === 'ws'
      ? await pooled(ids.length, 32, (i) => ExecServerClient.connect(server.url, { resumeSessionId: ids[i] }))
      : [];
  const t0 = performance.now();
  await Promise.all(
    ids.map(async (id, i) => {
      const s = performance.now();
      const client = clients[i];
      if (client !== undefined) {
        const h = await client.exec(['true'], { collect: false });
        if ((await h.wait({ check: false })).exitCode !== 0) throw new Error('true failed');
      } else await httpTrue(id);
      times.push(performance.now() - s);
    }),
  );
  const allMs = performance.now() - t0;
  await Promise.all(clients.map((c) => c.disconnect().catch(() => undefined)));
  const after = rssMb(pid);
  console.log(`load average: ${loadAverage()}`);
  console.log(`| what | figure |`);
  console.log(`| --- | ---: |`);
  console.log(`| server RSS idle (${args.src ? 'sources through tsx' : 'dist'}) | ${fmt(idle)} MB |`);
  console.log(
    `| ${made} sessions created by batches of ${BATCH} | ${fmt(createS, 1)} s (${fmt(made / createS, 2)} /s) |`,
  );
  console.log(
    `| server RSS with ${made} idle sessions | ${fmt(withN)} MB (${fmt(((withN - idle) * 1024) / made, 0)} KiB each) |`,
  );
  console.log(`| ... after ${fmt(IDLE_MS / 1000, 0)} s more idle | ${fmt(later)} MB |`);
  console.log(
    `| one \`true\` in each at once (${args.via}), all closed | ${fmt(allMs)} ms (p50 ${fmt(pct(times, 50))}, p99 ${fmt(pct(times, 99))} ms) |`,
  );
  console.log(`| server RSS after | ${fmt(after)} MB |`);
} finally {
  const d = performance.now();
  await pooled(ids.length, 16, (i) =>
    fetch(`${server.http}/v1/sessions/${ids[i]}`, { method: 'DELETE' }).catch(() => undefined),
  );
  console.log(`deleted ${ids.length} sessions in ${fmt((performance.now() - d) / 1000, 1)} s`);
  await stopServer(server.child);
}

async function httpTrue(id: string): Promise<void> {
  const res = await fetch(`${server.http}/v1/sessions/${id}/exec_command`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ cmd: 'true', yield_time_ms: 30_000 }),
  });
  const body = (await res.json()) as { exit_code?: number };
  if (res.status !== 200 || body.exit_code !== 0)
    throw new Error(`exec answered ${res.status}: ${JSON.stringify(body)}`);
}
