/**
 * Our server (local backend) against the reference `codex exec-server` (from the pinned
 * `@openai/codex` devDependency), in one run, on this machine, with the same sandbox setting on
 * both sides:
 *   - none:      ours with a `danger-full-access` session, the reference with `sandbox: null`;
 *   - sandboxed: ours with a `workspace-write` session (bubblewrap), the reference with the
 *                workspace-write `sandbox` object exactly as Codex sends it (and ours gets the
 *                same object, which narrows its session).
 * Measures (a) the round trip `process/start` of `true` -> `process/closed` (p50/p90), next to a
 * raw Node `spawn('true')`, and (b) streaming throughput of 256 MB to one client in pipe and in
 * PTY mode, `--repeat` times per side, the sides alternating (which goes first swaps every
 * time), reported as the median with the range: one stream on a shared virtual machine moves by
 * 10-20 % from one run to the next. Next to the PTY streams, in the same rounds, the bare
 * terminal: the same command on a terminal read by build/pty-relay into /dev/null, no server
 * and no client (the ceiling any server reading a terminal works under on this machine). Both
 * servers run as separate processes and are driven by the same client code; every measurement
 * waits for a quiet machine first.
 *
 *   node --import tsx bench/compare-reference.ts [--runs 200] [--mb 256] [--repeat 5]
 *     [--only none|sandboxed] [--side ours|reference] [--cases rt,pipe,pty]
 *     [--ours-flags '--ws-buffer-limit-bytes N']
 * Profiling our side: BENCH_OURS_NODE_ARGS='--cpu-prof --cpu-prof-dir=/some/dir'.
 * BENCH_DEBUG=1: per stream, the CPU of the machine, of each server process and its reaped
 * children, of this client, and the server's page faults (docs/benchmarks.md uses them).
 * The client both sides share and the readings of /proc are in bench/compare-reference/.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { nativeHelperPath } from '../src/backends/local/native-helpers.ts';
import { startReferenceExecServer } from '../test/support/codex-cli.ts';
import { type Client, connect, type Mode, type Side, startParams } from './compare-reference/client.ts';
import { cpuTicks, nativeServerPid, processTicks, settled } from './compare-reference/machine.ts';

const { values: args } = parseArgs({
  options: {
    repeat: { type: 'string', default: '5' },
    runs: { type: 'string', default: '200' },
    mb: { type: 'string', default: '256' },
    only: { type: 'string' },
    'ours-flags': { type: 'string', default: '' },
    side: { type: 'string' },
    cases: { type: 'string', default: 'rt,pipe,pty' },
    warmup: { type: 'string', default: '20' },
  },
});
const RUNS = Number(args.runs);
const MB = Number(args.mb);
const WARMUP = Number(args.warmup);
const REPEAT = Number(args.repeat);
/** Extra flags for our server (none by default: the same defaults a user gets). */
const OURS_FLAGS = (args['ours-flags'] ?? '').split(' ').filter(Boolean);

async function startOurs(workspaceRoot: string): Promise<Side> {
  const extraNodeArgs = (process.env['BENCH_OURS_NODE_ARGS'] ?? '').split(' ').filter(Boolean);
  const child: ChildProcess = spawn(
    process.execPath,
    [
      ...extraNodeArgs,
      '--import',
      'tsx',
      'src/main.ts',
      'serve',
      '--listen',
      'ws://127.0.0.1:0',
      '--backend',
      'local',
      '--workspace-root',
      workspaceRoot,
      '--log-level',
      'warn',
      ...OURS_FLAGS,
    ],
    {
      cwd: new URL('..', import.meta.url).pathname,
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const url = await new Promise<string>((resolve, reject) => {
    let buf = '';
    child.stdout!.setEncoding('utf8').on('data', (s: string) => {
      if (process.env['BENCH_DEBUG']) process.stderr.write(s); // e.g. --trace-gc from BENCH_OURS_NODE_ARGS
      buf += s;
      const m = /^(ws:\/\/\S+)\s*$/m.exec(buf);
      if (m?.[1]) resolve(m[1]);
    });
    child.once('exit', (code) => reject(new Error(`our server exited early (${String(code)})`)));
  });
  child.stdout!.resume();
  return {
    name: 'ours',
    url,
    pid: child.pid,
    close: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

const median = (values: number[]): number => {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? (s[mid] ?? NaN) : ((s[mid - 1] ?? NaN) + (s[mid] ?? NaN)) / 2;
};
const pct = (sorted: number[], p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;

async function roundTrips(c: Client, cwd: string, mode: Mode, tag: string): Promise<{ p50: number; p90: number }> {
  const times: number[] = [];
  for (let i = 0; i < WARMUP + RUNS; i++) {
    const t = performance.now();
    const r = await c.run(`${tag}-rt-${i}`, startParams(['/bin/true'], cwd, mode, false));
    if (r.exitCode !== 0) throw new Error(`${tag}: true exited ${String(r.exitCode)}`);
    if (i >= WARMUP) times.push(performance.now() - t);
  }
  times.sort((a, b) => a - b);
  return { p50: pct(times, 50), p90: pct(times, 90) };
}

async function throughput(
  c: Client,
  side: Side,
  cwd: string,
  mode: Mode,
  tty: boolean,
  tag: string,
  mb = MB,
): Promise<number> {
  const total = Math.ceil(mb * 1024 * 1024);
  const [cpu0, client0, server0] = [await cpuTicks(), process.cpuUsage(), await processTicks(side.pid)];
  const t = performance.now();
  const r = await c.run(
    `${tag}-tp-${tty ? 'pty' : 'pipe'}`,
    startParams(['/bin/sh', '-c', `head -c ${total} /dev/zero`], cwd, mode, tty),
  );
  const secs = (performance.now() - t) / 1000;
  if (process.env['BENCH_DEBUG']) {
    const client = process.cpuUsage(client0);
    const machine = (await cpuTicks()) - cpu0;
    const server1 = await processTicks(side.pid);
    const [server, children] = [server1.own - server0.own, server1.children - server0.children].map((t) =>
      (t / 100).toFixed(2),
    );
    console.error(
      `${tag} ${tty ? 'pty' : 'pipe'}: ${secs.toFixed(2)} s, CPU-s: machine ${(machine / 100).toFixed(2)}, server ${server} (its children ${children}; ${server1.faults - server0.faults} page faults), bench client ${((client.user + client.system) / 1e6).toFixed(2)}`,
    );
  }
  if (r.bytes < total) throw new Error(`${tag}: got ${r.bytes} of ${total} bytes (exit ${String(r.exitCode)})`);
  return r.bytes / 1024 / 1024 / secs;
}

async function rawSpawn(): Promise<{ p50: number; p90: number }> {
  const times: number[] = [];
  for (let i = 0; i < WARMUP + RUNS; i++) {
    const t = performance.now();
    await new Promise<void>((resolve, reject) => {
      const p = spawn('true', { stdio: 'ignore' });
      p.once('error', reject);
      p.once('close', () => resolve());
    });
    if (i >= WARMUP) times.push(performance.now() - t);
  }
  times.sort((a, b) => a - b);
  return { p50: pct(times, 50), p90: pct(times, 90) };
}

/** MB/s of `head -c` through a terminal with nothing but the relay reading it (into /dev/null). */
async function bareTerminal(mb = MB): Promise<number> {
  const total = mb * 1024 * 1024;
  const devNull = openSync('/dev/null', 'w');
  const t = performance.now();
  try {
    const relay = spawn(nativeHelperPath('pty-relay'), ['80', '24', '/bin/sh', '-c', `head -c ${total} /dev/zero`], {
      stdio: ['pipe', devNull, 'inherit', 'pipe'],
    });
    let report = '';
    (relay.stdio[3] as NodeJS.ReadableStream).setEncoding('utf8').on('data', (s: string) => (report += s));
    await new Promise<void>((resolve, reject) => {
      relay.once('error', reject);
      relay.once('close', (code) =>
        code === 0 && /exit 0\n/.test(report)
          ? resolve()
          : reject(new Error(`bare terminal: relay exit ${String(code)}, ${report.trim()}`)),
      );
    });
  } finally {
    closeSync(devNull);
  }
  const mbs = mb / ((performance.now() - t) / 1000);
  if (process.env['BENCH_DEBUG']) console.error(`bare terminal: ${mbs.toFixed(1)} MB/s`);
  return mbs;
}

interface Row {
  readonly what: string;
  readonly unit: string;
  readonly ours: number;
  readonly reference: number;
  /** Higher is better (throughput) or lower is better (latency). */
  readonly better: 'higher' | 'lower';
  /** Streams: min-max of the repeated runs, per side. */
  readonly ranges?: readonly [string, string];
}

/** Per side and mode: the round trip percentiles and the median MB/s of each stream. */
type Result = { p50: number; p90: number; pipe: number; pty: number };
const NONE: Result = { p50: NaN, p90: NaN, pipe: NaN, pty: NaN };

/** One run of the comparison: what it measures, on which sides, and what it found so far. */
interface Run {
  readonly cwd: string;
  readonly ours: Side;
  readonly reference: Side;
  readonly modes: Mode[];
  readonly cases: Set<string>;
  readonly sides: Side[];
  readonly result: Map<string, Result>;
  /** Streams: min-max of the repeated runs, per side, mode and kind of stream. */
  readonly ranges: Map<string, string>;
  /** MB/s of the bare terminal, one per round. */
  readonly bare: number[];
}

const key = (side: Side, mode: Mode): string => `${side.name}/${mode}`;

/**
 * Round trips of every mode first, then streams: a 256 MB stream leaves a server process
 * with a larger heap, which makes its next fork()s slower and would bias what follows.
 */
async function measureRoundTrips(run: Run): Promise<void> {
  if (!run.cases.has('rt')) return;
  for (const mode of run.modes) {
    for (const side of run.sides) {
      const c = await connect(side, mode);
      run.result.set(key(side, mode), {
        ...NONE,
        ...(await settled(() => roundTrips(c, run.cwd, mode, `${side.name}-${mode}`))),
      });
      c.close();
    }
  }
}

/** The streams of one mode: a warm-up per side, then `REPEAT` alternating rounds. */
async function measureStreams(run: Run, mode: Mode): Promise<void> {
  const { cwd, cases, sides } = run;
  const streams = new Map<string, number[]>();
  const record = (side: Side, what: 'pipe' | 'pty', mbs: number): void => {
    const k = `${key(side, mode)}/${what}`;
    streams.set(k, [...(streams.get(k) ?? []), mbs]);
  };
  // One unmeasured stream per side first: after a minute of round trips, code and files a
  // stream needs may be paged out (this VM reclaims pages idle for 60 s), and the first
  // stream paid for faulting them back in (ours 194-216 MB/s against 270-350 afterwards).
  for (const side of sides) {
    const c = await connect(side, mode);
    if (cases.has('pipe')) await throughput(c, side, cwd, mode, false, `${side.name}-${mode}-warmup`, MB / 8);
    if (cases.has('pty')) await throughput(c, side, cwd, mode, true, `${side.name}-${mode}-warmup`, MB / 8);
    c.close();
  }
  for (let rep = 0; rep < REPEAT; rep++) {
    for (const side of rep % 2 === 0 ? sides : [...sides].reverse()) {
      const c = await connect(side, mode);
      for (const what of ['pipe', 'pty'] as const) {
        if (!cases.has(what)) continue;
        const tty = what === 'pty';
        record(side, what, await settled(() => throughput(c, side, cwd, mode, tty, `${side.name}-${mode}`)));
      }
      c.close();
    }
    if (cases.has('pty')) run.bare.push(await settled(() => bareTerminal()));
  }
  for (const side of sides) {
    const r = run.result.get(key(side, mode)) ?? { ...NONE };
    for (const what of ['pipe', 'pty'] as const) {
      const all = streams.get(`${key(side, mode)}/${what}`);
      if (!all) continue;
      r[what] = median(all);
      console.error(`${side.name} ${mode} ${what} MB/s: ${all.map((v) => v.toFixed(0)).join(' ')}`);
      run.ranges.set(`${key(side, mode)}/${what}`, `${Math.min(...all).toFixed(0)}-${Math.max(...all).toFixed(0)}`);
    }
    run.result.set(key(side, mode), r);
  }
}

/** The table's rows, ours against the reference, per mode (and a summary line of each on stderr). */
function tableRows(run: Run): Row[] {
  const { ours, reference, ranges } = run;
  const rows: Row[] = [];
  for (const mode of run.modes) {
    const o = run.result.get(key(ours, mode)) ?? NONE;
    const r = run.result.get(key(reference, mode)) ?? NONE;
    console.error(
      `${mode}: ours rt p50 ${o.p50.toFixed(2)} ms, pipe ${o.pipe.toFixed(0)} MB/s, pty ${o.pty.toFixed(0)} MB/s; reference rt p50 ${r.p50.toFixed(2)} ms, pipe ${r.pipe.toFixed(0)} MB/s, pty ${r.pty.toFixed(0)} MB/s`,
    );
    rows.push(
      { what: `${mode}: round trip p50`, unit: 'ms', ours: o.p50, reference: r.p50, better: 'lower' },
      { what: `${mode}: round trip p90`, unit: 'ms', ours: o.p90, reference: r.p90, better: 'lower' },
      ...(['pipe', 'pty'] as const).map(
        (what): Row => ({
          what: `${mode}: ${what === 'pty' ? 'PTY' : 'pipe'} ${MB} MB`,
          unit: 'MB/s',
          ours: o[what],
          reference: r[what],
          better: 'higher',
          ranges: [ranges.get(`${key(ours, mode)}/${what}`) ?? '', ranges.get(`${key(reference, mode)}/${what}`) ?? ''],
        }),
      ),
    );
  }
  return rows;
}

/** The report on stdout: the machine, the floors (raw spawn, bare terminal) and the table. */
function printReport(raw: { p50: number; p90: number }, bare: number[], rows: Row[]): void {
  const fmt = (n: number): string => (n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2));
  console.log(
    `\nMachine: ${cpus().length} x ${cpus()[0]?.model ?? '?'}, Node ${process.version}; ${RUNS} round trips per case (after ${WARMUP} warm-up); ${MB} MB per stream, median of ${REPEAT} alternating runs per side (range in brackets)`,
  );
  console.log(`Our server's extra flags: ${OURS_FLAGS.join(' ') || '(none)'}`);
  console.log(`Raw Node spawn('true') -> close: p50 ${fmt(raw.p50)} ms, p90 ${fmt(raw.p90)} ms`);
  if (bare.length)
    console.log(
      `Bare terminal (the PTY command read by build/pty-relay into /dev/null; no server, no client): median ${fmt(median(bare))} MB/s [${Math.min(...bare).toFixed(0)}-${Math.max(...bare).toFixed(0)}], ${bare.length} runs in the same rounds`,
    );
  console.log('');
  console.log('| case | unit | ours | reference | ours/reference | ours is |');
  console.log('|---|---|---:|---:|---:|---|');
  for (const row of rows) {
    const ratio = row.ours / row.reference;
    const factor = row.better === 'lower' ? row.reference / row.ours : ratio;
    const [ourRange, refRange] = row.ranges ?? ['', ''];
    const value = (v: number, range: string): string => (range ? `${fmt(v)} [${range}]` : fmt(v));
    const times = (f: number): string => f.toFixed(f < 2 ? 2 : 1);
    console.log(
      `| ${row.what} | ${row.unit} | ${value(row.ours, ourRange)} | ${value(row.reference, refRange)} | ${ratio.toFixed(3)} | ${factor >= 1 ? `${times(factor)}x better` : `${times(1 / factor)}x worse`} |`,
    );
  }
}

async function main(): Promise<void> {
  const workspaceRoot = await mkdtemp(join(tmpdir(), 'bench-ours-'));
  const cwd = await mkdtemp(join(tmpdir(), 'bench-cwd-'));
  const ours = await startOurs(workspaceRoot);
  const refServer = await startReferenceExecServer({ cwd });
  const reference: Side = {
    name: 'reference',
    url: refServer.url,
    pid: await nativeServerPid(refServer.child.pid),
    close: refServer.close,
  };
  try {
    const raw = await rawSpawn();
    console.error(`raw spawn('true'): p50 ${raw.p50.toFixed(2)} ms, p90 ${raw.p90.toFixed(2)} ms`);
    const run: Run = {
      cwd,
      ours,
      reference,
      modes: args.only ? [args.only as Mode] : ['none', 'sandboxed'],
      cases: new Set((args.cases ?? '').split(',')),
      sides: [ours, reference].filter((s) => !args.side || s.name === args.side),
      result: new Map(),
      ranges: new Map(),
      bare: [],
    };
    await measureRoundTrips(run);
    for (const mode of run.modes) await measureStreams(run, mode);
    printReport(raw, run.bare, tableRows(run));
  } finally {
    await ours.close();
    await reference.close();
    await rm(workspaceRoot, { recursive: true, force: true });
    await rm(cwd, { recursive: true, force: true });
  }
}

await main();
