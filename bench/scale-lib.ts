/**
 * What bench/burst.ts and bench/many-sessions.ts share: a server process of ours (the sources
 * through tsx, or the built JavaScript as production runs it), raw dockerode containers in the
 * shape a program without the server makes them, a bounded-concurrency runner and the figures.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import type { Duplex } from 'node:stream';
import Docker from 'dockerode';

export const docker = new Docker();

export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

export interface OurServer {
  readonly url: string;
  readonly http: string;
  readonly child: ChildProcess;
  readonly instanceId: string;
}

/**
 * Our server, `--backend docker`, in its own process. `dist`: node on dist/main.js with the
 * image's flags (production); otherwise the sources through tsx (a checkout's `npm start`).
 */
export async function startServer(image: string, extra: string[], o: { dist?: boolean } = {}): Promise<OurServer> {
  const port = await freePort();
  const instanceId = `bench-${port}`;
  const dist = o.dist === true && existsSync('dist/main.js');
  const entry = dist ? ['--max-semi-space-size=2', 'dist/main.js'] : ['--import', 'tsx', 'src/main.ts'];
  const child = spawn(
    process.execPath,
    [
      ...entry,
      'serve',
      ...['--backend', 'docker', '--image', image, '--listen', `ws://127.0.0.1:${port}`],
      ...['--log-level', 'warn', '--instance-id', instanceId, '--cpus', '1'],
      ...extra,
    ],
    { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, NODE_ENV: dist ? 'production' : '' } },
  );
  const http = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 1200; i++) {
    if (child.exitCode !== null) throw new Error(`server exited with code ${child.exitCode} before it was ready`);
    if (
      await fetch(`${http}/readyz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return { url: `ws://127.0.0.1:${port}`, http, child, instanceId };
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill('SIGKILL');
  throw new Error('server did not become ready within 120 s');
}

export async function stopServer(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const gone = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await gone;
}

/** Resident memory of a process, MB. */
export function rssMb(pid: number | undefined): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN) / 1024;
}

/** Runs `n` jobs, `concurrency` at a time; resolves with each job's result, in order. */
export async function pooled<T>(n: number, concurrency: number, job: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, concurrency) }, async () => {
      while (next < n) {
        const i = next++;
        out[i] = await job(i);
      }
    }),
  );
  return out;
}

/** A raw container as a dockerode program makes one: create + start, kept alive. */
export async function rawContainer(image: string): Promise<Docker.Container> {
  const c = await docker.createContainer({
    Image: image,
    Cmd: ['/bin/sh', '-c', 'trap "exit 0" TERM; while :; do sleep 3600 & wait $!; done'],
    Labels: { 'exec-server-bench': 'raw' },
    HostConfig: { NetworkMode: 'none', Init: true, NanoCpus: 1e9 },
  });
  await c.start();
  return c;
}

/** One raw exec to the end: create, hijacked start, drain, inspect. */
export async function rawExec(c: Docker.Container, cmd: string[]): Promise<void> {
  const exec = await c.exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
  const socket = (await exec.start({ hijack: true, stdin: false })) as unknown as Duplex;
  socket.resume();
  await new Promise((r) => socket.once('close', r));
  for (let delay = 1; ; delay = Math.min(delay * 2, 50)) {
    if (!(await exec.inspect()).Running) break;
    await new Promise((r) => setTimeout(r, delay));
  }
}

export async function removeAll(containers: Docker.Container[], concurrency = 16): Promise<void> {
  await pooled(containers.length, concurrency, (i) => containers[i]!.remove({ force: true }).catch(() => undefined));
}

/** Unclaimed warm-pool containers of a server (by its instance label). */
export async function poolSize(instanceId: string): Promise<number> {
  const list = await docker.listContainers({
    filters: { label: [`exec-server.instance=${instanceId}`, 'exec-server.pool=true'] },
  });
  return list.filter((c) => (c.Names?.[0] ?? '').includes('exec-server-pool-')).length;
}

export const fmt = (n: number, d = 1): string => n.toFixed(d);

export function loadAverage(): string {
  return readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
}
