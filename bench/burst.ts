/**
 * Session creation at scale against raw dockerode, side by side in one run (docs/benchmarks.md,
 * "Bursts and creation"). "Ours" is the whole server (its own process, `--backend docker`)
 * driven over WebSocket by the SDK; "raw" is what a program using dockerode directly does.
 *
 * Cases:
 *   pool  The self-sizing warm pool at its defaults. A first burst of N sessions (the demand the
 *         pool learns from; the pool is at its minimum then), deleted; a quiet period (default
 *         a minute; raw runs inside it, once the pool has refilled); then the measured burst:
 *         N sessions, `--concurrency` at a time, each to its first `true` closed, against raw
 *         create + start + exec of N at the same concurrency (target: ours >= 3x sooner).
 *   cold  `--warm-pool 0`: M sessions created `--concurrency` at a time (HTTP `POST
 *         /v1/sessions`) against raw create + start of M (target: ours >= 1.0x as fast).
 *
 *   node --import tsx bench/burst.ts [--cases pool,cold] [--burst 64] [--cold 256]
 *     [--concurrency 16] [--quiet-ms 60000] [--image exec-server-test:latest]
 */
import { parseArgs } from 'node:util';
import { ExecServerClient } from '../src/client/index.ts';
import {
  fmt,
  loadAverage,
  pooled,
  poolSize,
  rawContainer,
  rawExec,
  removeAll,
  startServer,
  stopServer,
  type OurServer,
} from './scale-lib.ts';

const { values: args } = parseArgs({
  options: {
    cases: { type: 'string', default: 'pool,cold' },
    burst: { type: 'string', default: '64' },
    cold: { type: 'string', default: '256' },
    concurrency: { type: 'string', default: '16' },
    'quiet-ms': { type: 'string', default: '60000' },
    image: { type: 'string', default: 'exec-server-test:latest' },
  },
});
const BURST = Number(args.burst);
const COLD = Number(args.cold);
const CONC = Number(args.concurrency);
const QUIET_MS = Number(args['quiet-ms']);
const IMAGE = args.image;
const CASES = new Set(args.cases.split(','));

const row = (...cells: string[]): void => console.log(`| ${cells.join(' | ')} |`);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One session of the server's default policy (the pool's) to its first `true` closed. */
async function sessionWithFirstCommand(url: string): Promise<ExecServerClient> {
  const client = await ExecServerClient.connect(url, {
    session: { sandbox: { type: 'workspace-write' } as never, approvalPolicy: 'never' },
    clientName: 'bench',
  });
  const h = await client.exec(['true'], { collect: false });
  await h.wait({ check: false });
  return client;
}

/** N sessions, CONC at a time, each to its first command closed: wall time, ms. */
async function ourBurst(server: OurServer, n: number): Promise<{ ms: number; clients: ExecServerClient[] }> {
  const t = performance.now();
  const clients = await pooled(n, CONC, () => sessionWithFirstCommand(server.url));
  return { ms: performance.now() - t, clients };
}

async function deleteAll(clients: ExecServerClient[]): Promise<void> {
  await pooled(clients.length, CONC, (i) => clients[i]!.deleteSession().catch(() => undefined));
}

async function poolCase(): Promise<void> {
  const limit = String(Math.max(BURST, 256));
  const server = await startServer(IMAGE, ['--max-sessions', limit, '--max-sessions-per-tenant', limit]);
  try {
    const first = await ourBurst(server, BURST);
    await deleteAll(first.clients);
    const quietFrom = performance.now();
    // Raw runs inside the quiet period, once the pool holds what it learnt (so our refills do
    // not share the engine with it).
    let full = await poolSize(server.instanceId);
    while (performance.now() - quietFrom < QUIET_MS * 2 && full < BURST) {
      await sleep(500);
      full = await poolSize(server.instanceId);
    }
    const filledMs = performance.now() - quietFrom;
    const r0 = performance.now();
    const raw = await pooled(BURST, CONC, async () => {
      const c = await rawContainer(IMAGE);
      await rawExec(c, ['true']);
      return c;
    });
    const rawMs = performance.now() - r0;
    await removeAll(raw);
    await sleep(Math.max(0, QUIET_MS - (performance.now() - quietFrom)));
    const second = await ourBurst(server, BURST);
    await deleteAll(second.clients);
    console.log(`load average after the pool case: ${loadAverage()}`);
    row(
      `burst of ${BURST} after ${fmt(QUIET_MS / 1000, 0)} s quiet, ${CONC} at a time, to first \`true\` closed`,
      `${fmt(second.ms / 1000, 2)} s`,
      `${fmt(rawMs / 1000, 2)} s (create+start+exec)`,
      `${fmt(rawMs / second.ms, 2)}x sooner`,
    );
    row(
      `first burst of ${BURST} (pool at its minimum; sizes it)`,
      `${fmt(first.ms / 1000, 2)} s`,
      '',
      `${fmt(rawMs / first.ms, 2)}x`,
    );
    row(`pool refilled to ${full} in`, `${fmt(filledMs / 1000, 1)} s`, '', '');
  } finally {
    await stopServer(server.child);
  }
}

async function coldCase(): Promise<void> {
  const limit = String(Math.max(COLD, 1024));
  const server = await startServer(IMAGE, [
    '--warm-pool',
    '0',
    '--max-sessions',
    limit,
    '--max-sessions-per-tenant',
    limit,
  ]);
  let oursMs = 0;
  try {
    const t = performance.now();
    const ids = await pooled(COLD, CONC, async () => {
      const res = await fetch(`${server.http}/v1/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ sandbox: { type: 'workspace-write' }, approvalPolicy: 'never' }),
      });
      if (res.status !== 201) throw new Error(`create answered ${res.status}: ${await res.text()}`);
      return ((await res.json()) as { sessionId: string }).sessionId;
    });
    oursMs = performance.now() - t;
    await pooled(ids.length, CONC, (i) => fetch(`${server.http}/v1/sessions/${ids[i]}`, { method: 'DELETE' }));
  } finally {
    await stopServer(server.child);
  }
  const r0 = performance.now();
  const raw = await pooled(COLD, CONC, () => rawContainer(IMAGE));
  const rawMs = performance.now() - r0;
  await removeAll(raw);
  console.log(`load average after the cold case: ${loadAverage()}`);
  row(
    `${COLD} sessions created ${CONC} at a time, --warm-pool 0`,
    `${fmt((COLD / oursMs) * 1000, 2)} /s (${fmt(oursMs / 1000, 1)} s)`,
    `${fmt((COLD / rawMs) * 1000, 2)} /s (create+start)`,
    `${fmt(rawMs / oursMs, 2)}x`,
  );
}

console.log(`bench/burst: ${new Date().toISOString()}, load average ${loadAverage()}`);
row('case', 'ours', 'raw dockerode', 'ratio');
row('---', '---:', '---:', '---:');
if (CASES.has('pool')) await poolCase();
if (CASES.has('cold')) await coldCase();
