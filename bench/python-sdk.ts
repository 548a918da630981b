/**
 * The Python SDK (clients/python) against the TypeScript SDK on one server: the round trip of
 * `true` (start until closed, sequential, p50/p90 after 20 warm-up runs) and a 64 MB pipe
 * stream (`head -c` once a line arrives on its stdin, every chunk handed to the caller, nothing
 * kept; timed from the start request to the end), the sides alternating.
 * Targets (issue of the Python SDK): round trip <= 1.5x the TypeScript SDK's, throughput >= 0.7x.
 * Both sides use a `danger-full-access` session so the sandbox does not add noise.
 *
 *   node --import tsx bench/python-sdk.ts [--runs 200] [--mb 64] [--repeat 3] [--python /usr/bin/python3]
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { parseArgs } from 'node:util';
import { promisify } from 'node:util';
import { ExecServerClient } from '../src/client/index.ts';

const run = promisify(execFile);
const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '200' },
    mb: { type: 'string', default: '64' },
    repeat: { type: 'string', default: '3' },
    python: { type: 'string', default: '/usr/bin/python3' },
  },
});
const RUNS = Number(args.runs);
const BYTES = Number(args.mb) * 1024 * 1024;
const REPEAT = Number(args.repeat);
const TOKEN = randomBytes(16).toString('hex');

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? Number.NaN;
};

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

async function python(url: string, kase: 'rt' | 'pipe', n: number): Promise<Record<string, unknown>> {
  const env = { ...process.env, PYTHONPATH: new URL('../clients/python', import.meta.url).pathname };
  const { stdout } = await run(
    args.python,
    [new URL('python_sdk.py', import.meta.url).pathname, url, TOKEN, kase, String(n)],
    {
      env,
      maxBuffer: 16 * 1024 * 1024,
    },
  );
  return JSON.parse(stdout) as Record<string, unknown>;
}

async function tsRoundTrips(url: string): Promise<number[]> {
  const client = await ExecServerClient.connect(url, {
    token: TOKEN,
    session: { sandbox: { type: 'danger-full-access' } },
  });
  try {
    for (let i = 0; i < 20; i++) await (await client.exec(['true'])).wait();
    const ms: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const t = performance.now();
      await (await client.exec(['true'])).wait();
      ms.push(performance.now() - t);
    }
    return ms;
  } finally {
    await client.deleteSession();
  }
}

async function tsPipe(url: string): Promise<number> {
  const client = await ExecServerClient.connect(url, {
    token: TOKEN,
    session: { sandbox: { type: 'danger-full-access' } },
  });
  try {
    const t = performance.now();
    // The command waits for a line on stdin, so the listener is there before the first byte
    // (output that comes before any listener is kept up to 1 MiB only).
    const proc = await client.exec(['sh', '-c', `read go; exec head -c ${BYTES} /dev/zero`], {
      collect: false,
      stdin: 'pipe',
    });
    let got = 0;
    proc.onOutput((c) => (got += c.data.length));
    await proc.sendStdin('go\n');
    await proc.wait();
    if (got !== BYTES) throw new Error(`TypeScript SDK got ${got} of ${BYTES} bytes`);
    return (performance.now() - t) / 1000;
  } finally {
    await client.deleteSession();
  }
}

const port = await freePort();
const url = `ws://127.0.0.1:${port}`;
const server = spawn(
  process.execPath,
  ['bin/exec-server.js', 'serve', '--listen', url, '--backend', 'local', '--log-level', 'warn'],
  { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, EXEC_SERVER_TOKEN: TOKEN } },
);
try {
  for (let i = 0; ; i++) {
    if (i > 300) throw new Error('server not ready after 30 s');
    if (
      await fetch(`http://127.0.0.1:${port}/healthz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const tsRt = await tsRoundTrips(url);
  const pyRt = (await python(url, 'rt', RUNS))['ms'] as number[];
  const mbps = (seconds: number): number => BYTES / 1e6 / seconds;
  const tsMbps: number[] = [];
  const pyMbps: number[] = [];
  await tsPipe(url); // warm-up, unmeasured
  for (let i = 0; i < REPEAT; i++) {
    const order = i % 2 === 0 ? ['ts', 'py'] : ['py', 'ts'];
    for (const side of order) {
      if (side === 'ts') tsMbps.push(mbps(await tsPipe(url)));
      else {
        const r = await python(url, 'pipe', BYTES);
        if (r['bytes'] !== BYTES) throw new Error(`Python SDK got ${String(r['bytes'])} of ${BYTES} bytes`);
        pyMbps.push(mbps(r['seconds'] as number));
      }
    }
  }
  const f = (n: number): string => n.toFixed(2);
  console.log(
    `round trip of true, ${RUNS} runs, ms p50/p90: TypeScript ${f(pct(tsRt, 50))}/${f(pct(tsRt, 90))}, Python ${f(pct(pyRt, 50))}/${f(pct(pyRt, 90))}`,
  );
  const rtRatio = pct(pyRt, 50) / pct(tsRt, 50);
  console.log(`  ratio Python/TypeScript p50: ${f(rtRatio)}x (target <= 1.5x)`);
  console.log(
    `pipe ${BYTES / 1048576} MB, MB/s median of ${REPEAT}: TypeScript ${f(pct(tsMbps, 50))} [${tsMbps.map(f).join(', ')}], Python ${f(pct(pyMbps, 50))} [${pyMbps.map(f).join(', ')}]`,
  );
  const tpRatio = pct(pyMbps, 50) / pct(tsMbps, 50);
  console.log(`  ratio Python/TypeScript: ${f(tpRatio)}x (target >= 0.7x)`);
  console.log(rtRatio <= 1.5 && tpRatio >= 0.7 ? 'both targets met' : 'a target is missed');
} finally {
  server.kill('SIGTERM');
}
