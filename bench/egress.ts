/**
 * Egress throughput (docs/benchmarks.md, "Egress"): a 64 MB download through a session's egress
 * proxy against the same download outside any session, side by side in one run.
 *
 * The origin is busybox httpd on 127.0.0.2 (a process of its own, so it competes with neither
 * side); the client is busybox wget on both sides: inside a docker session (runc, agent link)
 * through HTTP_PROXY (the agent's tunnel over the link socket to the server's proxy, which
 * decides; then its native relay takes wget's socket from the agent and splices it to the
 * origin), and on the host directly; bash's `time` around it on both sides. Target: through the
 * proxy >= 0.8x the direct rate. The first proxied sample includes starting the session's relay.
 *
 * `--runtime runsc` runs the session under gVisor: its sockets live in the sandbox's own kernel,
 * so no descriptor crosses to the relay, and the tunnel's bytes go over the engine's exec stream.
 *
 *   node --import tsx bench/egress.ts [--mb 64] [--repeat 3] [--image exec-server-test:latest] [--runtime runsc]
 */
import { execFile, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parseArgs } from 'node:util';
import { randomUUID } from 'node:crypto';
import { createDockerBackend } from '../src/backends/docker/index.ts';
import type { BackendExit, BackendSession, StreamName } from '../src/backends/types.ts';
import { parseAllowList } from '../src/egress/allow-list.ts';
import { EGRESS_PROXY_PORT, egressEnvironment, SessionEgress } from '../src/egress/session-egress.ts';
import { asSessionId, asTenantId } from '../src/ids.ts';
import { silentLogger } from '../src/logger.ts';

const { values: args } = parseArgs({
  options: {
    mb: { type: 'string', default: '64' },
    repeat: { type: 'string', default: '3' },
    image: { type: 'string', default: 'exec-server-test:latest' },
    runtime: { type: 'string' },
  },
});
const MB = Number(args.mb);
const REPEAT = Number(args.repeat);
const execFileP = promisify(execFile);

async function freePort(host: string): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, host, () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Runs `script` in the session; resolves with its wall time (ms) and output. */
async function inSession(
  session: BackendSession,
  script: string,
  env: Record<string, string>,
): Promise<[number, string]> {
  let out = '';
  let done!: (e: BackendExit) => void;
  const exited = new Promise<BackendExit>((r) => {
    done = r;
  });
  const t0 = performance.now();
  await session.spawn(
    {
      argv: ['sh', '-c', script],
      cwd: '/workspace',
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', HOME: '/root', ...env },
      mode: 'pipe-no-stdin',
      size: { cols: 80, rows: 24 },
      sandbox: { kind: 'unrestricted' },
    },
    {
      output: (_s: StreamName, d: Buffer) => {
        out += d.toString();
      },
      exit: (e) => done(e),
    },
  );
  const exit = await exited;
  const ms = performance.now() - t0;
  if (exit.kind !== 'exited' || exit.code !== 0) throw new Error(`in session: ${JSON.stringify(exit)} ${out}`);
  return [ms, out];
}

/**
 * The download timed by bash around busybox wget, the same on both sides: the figure is the
 * transfer (connection, proxy decision, relay) without the start of the command itself.
 */
const timed = (url: string): string => `bash -c 'TIMEFORMAT=%3R; time busybox wget -q -O /dev/null ${url}' 2>&1`;

async function onHost(url: string): Promise<number> {
  const { stdout } = await execFileP('sh', ['-c', timed(url)]);
  return Number(stdout.trim()) * 1000;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'bench-egress-'));
  const sockets = await mkdtemp(join(tmpdir(), 'bench-egress-links-'));
  await writeFile(join(dir, 'blob'), Buffer.alloc(MB * 1024 * 1024, 0x61));
  const port = await freePort('127.0.0.2');
  const httpd = spawn('busybox', ['httpd', '-f', '-p', `127.0.0.2:${port}`, '-h', dir], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 300));
  const backend = createDockerBackend(
    {
      defaultImage: args.image,
      instanceId: `bench-${randomUUID().slice(0, 8)}`,
      agentSocketDir: sockets,
      runtime: args.runtime,
    },
    silentLogger,
  );
  const url = `http://127.0.0.2:${port}/blob`;
  try {
    const session = await backend.createSession({
      id: asSessionId(randomUUID()),
      tenant: asTenantId('bench'),
      labels: {},
      resources: { memoryMb: 512, cpus: 2, pids: 256 },
      network: false,
    });
    const allow = [`127.0.0.2:${port}`];
    const egress = new SessionEgress({ allow, entries: parseAllowList(allow), onRecord: () => undefined });
    await egress.start(session);
    const env = egressEnvironment(EGRESS_PROXY_PORT);
    const proxied: number[] = [];
    const direct: number[] = [];
    for (let i = 0; i < REPEAT; i++) {
      // Side by side, alternating, so a change of load hits both.
      const before = egress.counts.bytesIn;
      const [, out] = await inSession(session, timed(url), env);
      const ms = Number(out.trim()) * 1000;
      // The native relay reports its bytes when it ends, a moment after the client saw the end.
      while (egress.counts.active > 0) await new Promise((r) => setTimeout(r, 5));
      const got = egress.counts.bytesIn - before;
      if (got < MB * 1024 * 1024) throw new Error(`proxied download got ${got} bytes`);
      proxied.push(ms);
      direct.push(await onHost(url));
    }
    const rate = (ms: number): number => MB / (ms / 1000);
    const p = rate(median(proxied));
    const d = rate(median(direct));
    console.log(
      `load average: ${(await import('node:os'))
        .loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')}`,
    );
    console.log(`runtime: ${args.runtime ?? "the engine's default"}`);
    console.log('case | MB/s (median of %d) | ratio', REPEAT);
    console.log(`direct (host wget) | ${d.toFixed(0)} | 1.00x`);
    console.log(`through the session's proxy | ${p.toFixed(0)} | ${(p / d).toFixed(2)}x (target >= 0.8x)`);
    const list = (xs: number[]): string => xs.map((ms) => rate(ms).toFixed(0)).join(', ');
    console.log(`samples, MB/s: direct ${list(direct)}; proxied ${list(proxied)}`);
    console.log(`client sockets taken by the relay: ${egress.counts.tookSocket} of ${egress.counts.connections}`);
    egress.close();
  } finally {
    await backend.close();
    httpd.kill();
    await rm(dir, { recursive: true, force: true });
    await rm(sockets, { recursive: true, force: true });
  }
}

await main();
