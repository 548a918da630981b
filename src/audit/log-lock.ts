/**
 * One writer per audit log: a second server appending to a log another one writes would
 * interleave two chains and break both. The writer holds `LOG.lock`, a file created with
 * O_EXCL next to the log that names it (pid, host, the process's start time); the lock is
 * removed when the log is closed. A lock left by a server that died (SIGKILL, OOM) is stale when
 * it names this host and its pid is gone, or is now another process (a different start time, or
 * this process's own pid after a container restart), and is then taken over. A lock of another
 * host cannot be judged from here: the server refuses to start and says which file to remove.
 */
import { readFileSync } from 'node:fs';
import { link, open, readFile, rename, unlink } from 'node:fs/promises';
import { hostname } from 'node:os';
import { execError } from '../errors.ts';

interface Holder {
  readonly pid: number;
  readonly host: string;
  /** Linux: the process's start time (clock ticks since boot), which a reused pid does not share. */
  readonly started?: string | undefined;
  readonly since: string;
}

/** The locks this process holds: its own pid in a lock is live only when listed here. */
const heldHere = new Set<string>();

/** Field 22 of /proc/PID/stat; undefined where there is no /proc. */
export function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count from after its last ')'.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

function parseHolder(text: string): Holder | undefined {
  try {
    const v = JSON.parse(text) as Partial<Holder>;
    const pidOk = typeof v.pid === 'number' && Number.isInteger(v.pid) && v.pid > 0;
    if (!pidOk || typeof v.host !== 'string' || typeof v.since !== 'string') return undefined;
    return { pid: v.pid, host: v.host, since: v.since, started: typeof v.started === 'string' ? v.started : undefined };
  } catch {
    return undefined;
  }
}

/** Whether the server a lock names still runs: `unknown` for another host's. */
function holderState(holder: Holder, lockPath: string): 'live' | 'stale' | 'unknown' {
  if (holder.host !== hostname()) return 'unknown';
  if (holder.pid === process.pid) return heldHere.has(lockPath) ? 'live' : 'stale';
  try {
    process.kill(holder.pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return 'stale';
  }
  const started = processStartTime(holder.pid);
  return holder.started !== undefined && started !== undefined && started !== holder.started ? 'stale' : 'live';
}

function refusal(logPath: string, lockPath: string, holder: Holder | undefined, state: string): Error {
  const why =
    holder === undefined
      ? `its lock ${lockPath} names no server`
      : state === 'live'
        ? `another server writes it (pid ${holder.pid}, since ${holder.since})`
        : `a server on host ${holder.host} holds its lock ${lockPath} (pid ${holder.pid}, since ${holder.since})`;
  const fix =
    state === 'live'
      ? 'stop that server or give this one another --audit-log'
      : `if no server writes the log, remove ${lockPath}`;
  return execError('EXEC_ERR_CONFIG', `the audit log ${logPath} has one writer: ${why}; ${fix}`);
}

/** Moves a stale lock away, unless it changed since it was read (another server took it meanwhile). */
async function removeStale(lockPath: string, stale: string): Promise<void> {
  const aside = `${lockPath}.stale-${process.pid}`;
  try {
    await rename(lockPath, aside);
  } catch {
    return; // gone already: the next attempt sees what is there now
  }
  const moved = await readFile(aside, 'utf8').catch(() => undefined);
  if (moved !== stale) await link(aside, lockPath).catch(() => undefined);
  await unlink(aside).catch(() => undefined);
}

export interface LogLock {
  release(): Promise<void>;
}

/** Takes the lock of the audit log at `logPath` (its real path), or throws `EXEC_ERR_CONFIG` naming the writer. */
export async function lockLog(logPath: string): Promise<LogLock> {
  const lockPath = `${logPath}.lock`;
  const mine = `${JSON.stringify({
    pid: process.pid,
    host: hostname(),
    started: processStartTime(process.pid),
    since: new Date().toISOString(),
  } satisfies Holder)}\n`;
  for (let attempt = 0; attempt < 3; attempt++) {
    if (await create(lockPath, mine)) {
      heldHere.add(lockPath);
      return {
        release: async () => {
          heldHere.delete(lockPath);
          if ((await readFile(lockPath, 'utf8').catch(() => undefined)) === mine)
            await unlink(lockPath).catch(() => undefined);
        },
      };
    }
    const text = await readFile(lockPath, 'utf8').catch(() => undefined);
    if (text === undefined) continue; // released meanwhile
    const holder = parseHolder(text);
    const state = holder === undefined ? 'unreadable' : holderState(holder, lockPath);
    if (state !== 'stale') throw refusal(logPath, lockPath, holder, state);
    await removeStale(lockPath, text);
  }
  throw execError(
    'EXEC_ERR_CONFIG',
    `the audit log ${logPath}: its lock ${lockPath} kept changing (servers starting at once?)`,
  );
}

/** Creates the lock with `text`; false when it exists. */
async function create(lockPath: string, text: string): Promise<boolean> {
  let handle: Awaited<ReturnType<typeof open>>;
  try {
    handle = await open(lockPath, 'wx', 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw execError('EXEC_ERR_CONFIG', `cannot create the audit log's lock ${lockPath}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  try {
    await handle.writeFile(text);
  } catch (err) {
    await unlink(lockPath).catch(() => undefined);
    throw err;
  } finally {
    await handle.close();
  }
  return true;
}
