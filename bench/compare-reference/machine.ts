/**
 * What bench/compare-reference.ts reads of the machine (/proc): CPU time of a process and of all
 * CPUs, which process is the reference's server, and whether the machine is quiet enough to
 * measure.
 */
import { readdir, readFile } from 'node:fs/promises';

/** CPU time of one process (all its threads) and of its reaped children so far, in clock ticks. */
export async function processTicks(
  pid: number | undefined,
): Promise<{ own: number; children: number; faults: number }> {
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
export async function nativeServerPid(launcher: number | undefined): Promise<number | undefined> {
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
export async function cpuTicks(): Promise<number> {
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
export async function settled<T>(measure: () => Promise<T>): Promise<T> {
  const until = performance.now() + 10_000;
  let busy = await busyShare(200);
  while (busy > 0.15 && performance.now() < until) busy = await busyShare(200);
  if (busy > 0.15) console.error(`warning: machine still ${(busy * 100).toFixed(0)} % busy before a measurement`);
  return measure();
}
