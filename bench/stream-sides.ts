/**
 * Helpers of bench/docker-agent.ts's stream cases: a local-backend server for the column the
 * docker path is compared with in the same run, and the CPU the processes of a stream use.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A local-backend server of this checkout (the stream's reference column): its URL and process. */
export async function startLocal(): Promise<{ url: string; child: ChildProcess; stop(): Promise<void> }> {
  const root = mkdtempSync(join(tmpdir(), 'bench-local-'));
  const child = spawn(
    process.execPath,
    [
      ...['--import', 'tsx', 'src/main.ts', 'serve', '--listen', 'ws://127.0.0.1:0', '--backend', 'local'],
      ...['--workspace-root', root, '--log-level', 'warn'],
    ],
    { cwd: new URL('..', import.meta.url).pathname, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const url = await new Promise<string>((resolve, reject) => {
    let buf = '';
    child.stdout?.setEncoding('utf8').on('data', (s: string) => {
      buf += s;
      const m = /^(ws:\/\/\S+)\s*$/m.exec(buf);
      if (m?.[1]) resolve(m[1]);
    });
    child.once('exit', (code) => reject(new Error(`the local server exited early (${String(code)})`)));
  });
  return {
    url,
    child,
    async stop() {
      if (child.exitCode === null) {
        const gone = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await gone;
      }
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/** CPU seconds used so far by the processes a stream crosses outside the container. */
export function cpuSeconds(serverPid: number | undefined): Record<'client' | 'server' | 'engine', number> {
  const ticks = (pid: number | string): number => {
    try {
      const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
      return Number(f[11]) + Number(f[12]);
    } catch {
      return 0;
    }
  };
  let engine = 0;
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    let comm = '';
    try {
      comm = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    } catch {
      continue;
    }
    if (comm === 'dockerd' || comm.startsWith('containerd-shim')) engine += ticks(pid);
  }
  // Clock ticks: 100 per second on Linux.
  return {
    client: ticks(process.pid) / 100,
    server: serverPid === undefined ? 0 : ticks(serverPid) / 100,
    engine: engine / 100,
  };
}
