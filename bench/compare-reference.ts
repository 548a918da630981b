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
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { nativeHelperPath } from '../src/backends/local/native-helpers.ts';
import { startReferenceExecServer } from '../test/support/codex-cli.ts';

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

type Json = Record<string, unknown>;

/** A minimal JSON-RPC client over one WebSocket, the same for both servers. */
class Client {
  readonly #ws: WebSocket;
  #nextId = 1;
  readonly #pending = new Map<number, { resolve: (v: Json) => void; reject: (e: Error) => void }>();
  /** Per process: called for every notification about it. */
  readonly #listeners = new Map<string, (method: string, params: Json) => void>();

  #closedWith: Error | undefined;
  readonly #onClose = new Set<(err: Error) => void>();

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.on('close', (code: number, reason: Buffer) => {
      this.#closedWith = new Error(`connection closed: ${code} ${reason.toString()}`);
      for (const p of this.#pending.values()) p.reject(this.#closedWith);
      this.#pending.clear();
      for (const f of this.#onClose) f(this.#closedWith);
    });
    ws.on('message', (data: Buffer) => {
      const msg = JSON.parse(data.toString('utf8')) as Json;
      if (typeof msg['id'] === 'number' && ('result' in msg || 'error' in msg)) {
        const p = this.#pending.get(msg['id']);
        this.#pending.delete(msg['id']);
        if (msg['error']) p?.reject(new Error(JSON.stringify(msg['error'])));
        else p?.resolve(msg['result'] as Json);
        return;
      }
      const params = (msg['params'] ?? {}) as Json;
      const id = params['processId'];
      if (typeof msg['method'] === 'string' && typeof id === 'string') this.#listeners.get(id)?.(msg['method'], params);
    });
  }

  static open(url: string): Promise<Client> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 1024 * 1024 * 1024 });
      ws.once('open', () => resolve(new Client(ws)));
      ws.once('error', reject);
    });
  }

  request(method: string, params: unknown): Promise<Json> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#ws.send(JSON.stringify({ id, method, params }));
    });
  }

  notify(method: string, params: unknown): void {
    this.#ws.send(JSON.stringify({ method, params }));
  }

  /** Starts a process; resolves at `process/closed` with the output bytes seen. */
  async run(processId: string, startParams: Json): Promise<{ bytes: number; exitCode: unknown }> {
    let bytes = 0;
    let messages = 0;
    let exitCode: unknown;
    if (this.#closedWith) throw this.#closedWith;
    const closed = new Promise<void>((resolve, reject) => {
      const onClose = (err: Error): void => reject(err);
      this.#onClose.add(onClose);
      this.#listeners.set(processId, (method, params) => {
        if (method === 'process/output') {
          bytes += Buffer.from(params['chunk'] as string, 'base64').length;
          messages++;
        } else if (method === 'process/exited') exitCode = params['exitCode'];
        else if (method === 'process/closed') {
          this.#onClose.delete(onClose);
          resolve();
        }
      });
    });
    await this.request('process/start', { processId, ...startParams });
    await closed;
    this.#listeners.delete(processId);
    if (process.env['BENCH_DEBUG']) console.error(`${processId}: ${bytes} bytes in ${messages} output messages`);
    return { bytes, exitCode };
  }

  close(): void {
    this.#ws.terminate();
  }
}

interface Side {
  readonly name: 'ours' | 'reference';
  readonly url: string;
  /** The server's process id, for its CPU time in BENCH_DEBUG lines. */
  readonly pid: number | undefined;
  close(): Promise<void>;
}

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

/** The workspace-write `sandbox` object as Codex 0.171.0 sends it (see codex-client-trace.md). */
function codexWorkspaceWrite(cwd: string): Json {
  const special = (kind: string, subpath?: string): Json => ({
    type: 'special',
    value: subpath === undefined ? { kind } : { kind, subpath },
  });
  const uri = `file://${cwd}`;
  return {
    permissions: {
      type: 'managed',
      file_system: {
        type: 'restricted',
        entries: [
          { path: special('root'), access: 'read' },
          { path: special('project_roots'), access: 'write' },
          { path: special('slash_tmp'), access: 'write' },
          { path: special('tmpdir'), access: 'write' },
          ...['.git', '.agents', '.codex', '.aws'].map((s) => ({
            path: special('project_roots', s),
            access: 'read',
            missing_path_behavior: 'skip',
          })),
        ],
      },
      network: 'restricted',
    },
    cwd: uri,
    workspaceRoots: [uri],
    windowsSandboxLevel: 'disabled',
    windowsSandboxProxySettingsMode: 'reconcile',
    useLegacyLandlock: false,
  };
}

type Mode = 'none' | 'sandboxed';

async function connect(side: Side, mode: Mode): Promise<Client> {
  const c = await Client.open(side.url);
  const init: Json = { clientName: 'codex-environment', resumeSessionId: null };
  // Ours: the session's server-side policy (the reference has none; it takes the per-call object).
  if (side.name === 'ours')
    init['session'] = { sandbox: mode === 'none' ? { type: 'danger-full-access' } : { type: 'workspace-write' } };
  await c.request('initialize', init);
  c.notify('initialized', {});
  return c;
}

function startParams(argv: string[], cwd: string, mode: Mode, tty: boolean): Json {
  return {
    argv,
    cwd: `file://${cwd}`,
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', LC_ALL: 'C.UTF-8' },
    tty,
    pipeStdin: false,
    arg0: null,
    sandbox: mode === 'none' ? null : codexWorkspaceWrite(cwd),
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

/** CPU time of one process (all its threads) and of its reaped children so far, in clock ticks. */
async function processTicks(pid: number | undefined): Promise<{ own: number; children: number; faults: number }> {
  if (pid === undefined) return { own: NaN, children: NaN, faults: NaN };
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  const f = stat
    .slice(stat.lastIndexOf(')') + 2)
    .split(' ')
    .map(Number);
  // utime, stime, cutime, cstime: fields 14 to 17 of proc(5)
  return {
    own: (f[11] ?? NaN) + (f[12] ?? NaN),
    children: (f[13] ?? NaN) + (f[14] ?? NaN),
    faults: (f[7] ?? NaN) + (f[9] ?? NaN),
  };
}

/** The npm package's launcher runs the native `codex` binary as a child: that one is the server. */
async function nativeServerPid(launcher: number | undefined): Promise<number | undefined> {
  const procs = await Promise.all(
    (await readdir('/proc'))
      .filter((d) => /^\d+$/.test(d))
      .map(async (d) => {
        const stat = await readFile(`/proc/${d}/stat`, 'utf8').catch(() => '');
        const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
        return { pid: Number(d), comm, ppid: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) };
      }),
  );
  const tree = new Set([launcher]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const p of procs) {
      if (tree.has(p.ppid) && !tree.has(p.pid)) {
        tree.add(p.pid);
        grew = true;
      }
    }
  }
  return procs.find((p) => tree.has(p.pid) && p.comm === 'codex')?.pid ?? launcher;
}

/** Busy time of all CPUs so far, in clock ticks (1/100 s), from /proc/stat. */
async function cpuTicks(): Promise<number> {
  const f = (await readFile('/proc/stat', 'utf8')).split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  return f.reduce((x, y) => x + y, 0) - (f[3] ?? 0) - (f[4] ?? 0);
}

/** Busy share of all CPUs over `ms`, from /proc/stat. */
async function busyShare(ms: number): Promise<number> {
  const sample = async (): Promise<number[]> =>
    (await readFile('/proc/stat', 'utf8')).split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const a = await sample();
  await new Promise((r) => setTimeout(r, ms));
  const b = await sample();
  const d = b.map((v, i) => v - (a[i] ?? 0));
  const total = d.reduce((x, y) => x + y, 0);
  const idle = (d[3] ?? 0) + (d[4] ?? 0);
  return total > 0 ? 1 - idle / total : 0;
}

/**
 * Runs `measure` once the machine is quiet (under 15 % busy over 200 ms, at most 10 s of
 * waiting): what one server left running (the reference tears down its sandboxes after the
 * round trips) must not slow the next measurement, whichever side it is.
 */
async function settled<T>(measure: () => Promise<T>): Promise<T> {
  const until = performance.now() + 10_000;
  let busy = await busyShare(200);
  while (busy > 0.15 && performance.now() < until) busy = await busyShare(200);
  if (busy > 0.15) console.error(`warning: machine still ${(busy * 100).toFixed(0)} % busy before a measurement`);
  return measure();
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
  const rows: Row[] = [];
  try {
    const raw = await rawSpawn();
    console.error(`raw spawn('true'): p50 ${raw.p50.toFixed(2)} ms, p90 ${raw.p90.toFixed(2)} ms`);
    const modes: Mode[] = args.only ? [args.only as Mode] : ['none', 'sandboxed'];
    const cases = new Set((args.cases ?? '').split(','));
    const ranges = new Map<string, string>();
    const sides = [ours, reference].filter((s) => !args.side || s.name === args.side);
    const none = { p50: NaN, p90: NaN, pipe: NaN, pty: NaN };
    const result = new Map<string, { p50: number; p90: number; pipe: number; pty: number }>();
    const key = (side: Side, mode: Mode): string => `${side.name}/${mode}`;
    const streams = new Map<string, number[]>();
    const bare: number[] = [];
    const record = (side: Side, mode: Mode, what: 'pipe' | 'pty', mbs: number): void => {
      const k = `${key(side, mode)}/${what}`;
      streams.set(k, [...(streams.get(k) ?? []), mbs]);
    };
    // Round trips of every mode first, then streams: a 256 MB stream leaves a server process
    // with a larger heap, which makes its next fork()s slower and would bias what follows.
    if (cases.has('rt')) {
      for (const mode of modes) {
        for (const side of sides) {
          const c = await connect(side, mode);
          result.set(key(side, mode), {
            ...none,
            ...(await settled(() => roundTrips(c, cwd, mode, `${side.name}-${mode}`))),
          });
          c.close();
        }
      }
    }
    for (const mode of modes) {
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
            record(side, mode, what, await settled(() => throughput(c, side, cwd, mode, tty, `${side.name}-${mode}`)));
          }
          c.close();
        }
        if (cases.has('pty')) bare.push(await settled(() => bareTerminal()));
      }
      for (const side of sides) {
        const r = result.get(key(side, mode)) ?? { ...none };
        for (const what of ['pipe', 'pty'] as const) {
          const all = streams.get(`${key(side, mode)}/${what}`);
          if (!all) continue;
          r[what] = median(all);
          console.error(`${side.name} ${mode} ${what} MB/s: ${all.map((v) => v.toFixed(0)).join(' ')}`);
          ranges.set(`${key(side, mode)}/${what}`, `${Math.min(...all).toFixed(0)}-${Math.max(...all).toFixed(0)}`);
        }
        result.set(key(side, mode), r);
      }
    }
    for (const mode of modes) {
      const o = result.get(key(ours, mode)) ?? none;
      const r = result.get(key(reference, mode)) ?? none;
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
            ranges: [
              ranges.get(`${key(ours, mode)}/${what}`) ?? '',
              ranges.get(`${key(reference, mode)}/${what}`) ?? '',
            ],
          }),
        ),
      );
    }
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
  } finally {
    await ours.close();
    await reference.close();
    await rm(workspaceRoot, { recursive: true, force: true });
    await rm(cwd, { recursive: true, force: true });
  }
}

await main();
