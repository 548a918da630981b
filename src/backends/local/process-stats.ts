/**
 * Resource use of a local session: the process trees under the commands it started, read from
 * /proc (each command runs in its own process group, so its descendants are its tree). Linux
 * reports CPU times in USER_HZ ticks, 100 per second on every architecture Node runs on.
 */
import { readdir, readFile } from 'node:fs/promises';
import type { SessionStats } from '../types.ts';

const NANOS_PER_TICK = 1e9 / 100;
/** Processes read per sample at most: a fork bomb must not make a stats call read /proc forever. */
const MAX_PROCESSES = 65_536;
/** /proc files read at once. */
const READ_BATCH = 64;

interface ProcEntry {
  readonly pid: number;
  readonly ppid: number;
  /** utime + stime + cutime + cstime: its own CPU time and that of the children it reaped. */
  readonly ticks: number;
}

/** Parses /proc/PID/stat; the command name may hold spaces and parentheses, so fields are counted from the last ')'. */
export function parseStat(pid: number, text: string): ProcEntry | undefined {
  const close = text.lastIndexOf(')');
  if (close < 0) return undefined;
  // After ")": state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
  const f = text.slice(close + 2).split(' ');
  const num = (i: number): number => Number(f[i - 3] ?? NaN);
  const ticks = num(14) + num(15) + num(16) + num(17);
  const ppid = num(4);
  if (!Number.isFinite(ticks) || !Number.isFinite(ppid)) return undefined;
  return { pid, ppid, ticks };
}

async function readEntries(): Promise<Map<number, ProcEntry>> {
  const names = await readdir('/proc');
  const entries = new Map<number, ProcEntry>();
  const pids = names
    .filter((n) => /^\d+$/.test(n))
    .slice(0, MAX_PROCESSES)
    .map(Number);
  // In batches: one open file per process at once could exhaust the server's descriptors.
  for (let i = 0; i < pids.length; i += READ_BATCH) {
    await Promise.all(
      pids.slice(i, i + READ_BATCH).map(async (pid) => {
        // A process may end between readdir and read: it is simply not counted.
        const text = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
        const entry = text === undefined ? undefined : parseStat(pid, text);
        if (entry) entries.set(pid, entry);
      }),
    );
  }
  return entries;
}

async function residentBytes(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const m = /^VmRSS:\s+(\d+)\s+kB$/m.exec(status);
  return m?.[1] === undefined ? 0 : Number(m[1]) * 1024;
}

/** One /proc scan serves every session sampled within this long (a list of N sessions costs one scan). */
const SCAN_REUSE_MS = 200;
let lastScan: { readonly at: number; readonly entries: Promise<Map<number, ProcEntry>> } | undefined;

function scan(): Promise<Map<number, ProcEntry>> {
  const now = Date.now();
  if (lastScan && now - lastScan.at < SCAN_REUSE_MS) return lastScan.entries;
  const entries = readEntries();
  lastScan = { at: now, entries };
  entries.catch(() => {
    if (lastScan?.entries === entries) lastScan = undefined;
  });
  return entries;
}

/** Sums CPU time, resident memory and process count over `roots` and all their descendants. */
export async function processTreeStats(roots: Iterable<number>): Promise<SessionStats> {
  const entries = await scan();
  const children = new Map<number, number[]>();
  for (const e of entries.values()) {
    const list = children.get(e.ppid);
    if (list) list.push(e.pid);
    else children.set(e.ppid, [e.pid]);
  }
  const tree = new Set<number>();
  const queue = [...roots].filter((pid) => entries.has(pid));
  while (queue.length > 0) {
    const pid = queue.pop() as number;
    if (tree.has(pid)) continue;
    tree.add(pid);
    for (const child of children.get(pid) ?? []) queue.push(child);
  }
  let ticks = 0;
  for (const pid of tree) ticks += entries.get(pid)?.ticks ?? 0;
  const members = [...tree];
  let memoryBytes = 0;
  for (let i = 0; i < members.length; i += READ_BATCH) {
    for (const bytes of await Promise.all(members.slice(i, i + READ_BATCH).map(residentBytes))) memoryBytes += bytes;
  }
  return { cpuNanos: ticks * NANOS_PER_TICK, memoryBytes, pids: tree.size };
}
