/**
 * Whose deny-read placeholders are whose. Each server's placeholders live in a directory of
 * their own under the state directory (bubblewrap.ts, `DenyPlaceholders`); its name carries the
 * owning process's pid and start time (`deny-<pid>.<start>-XXXXXX`), so a server that starts
 * can tell the directories of live servers from those of servers that ended without removing
 * theirs (SIGKILLed, or the host lost power: one host had 2,056), and sweep the latter.
 */
import { readFileSync } from 'node:fs';
import { chmod, readdir, rm } from 'node:fs/promises';
import { posix } from 'node:path';
import type { Logger } from '../../logger.ts';

/** A process's start time in clock ticks since boot (/proc/PID/stat, field 22); undefined when it is gone. */
export function processStart(pid: number | 'self'): string | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // After the command name, which may hold spaces and parentheses: field 3 (state) onwards.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return fields[19];
}

/** The owner part of this process's placeholder directory name: `<pid>.<start>`. */
export function ownerTag(): string {
  return `${process.pid}.${processStart('self') ?? '0'}`;
}

const OWNED = /^deny-(\d+)\.(\d+)-[A-Za-z0-9_]{6}$/;

/**
 * Whether the directory `name` belongs to no live server: its owner's pid is gone or is another
 * process now (its start time differs). A directory named before owners were recorded
 * (`deny-XXXXXX`) says nothing of whose it is and is left alone: a server of that version may
 * still run (the state directory is a tmpfs by default, emptied at boot).
 */
export function ownerless(name: string): boolean {
  const m = OWNED.exec(name);
  if (!m) return false;
  return processStart(Number(m[1])) !== m[2];
}

/** Removes the placeholder directories under `parent` that no live server owns; resolves with how many. */
export async function sweepOwnerless(parent: string, log: Logger): Promise<number> {
  // Without /proc nothing tells a live owner from a dead one: leave everything.
  if (processStart('self') === undefined) return 0;
  const names = await readdir(parent).catch(() => [] as string[]);
  let swept = 0;
  for (const name of names.filter(ownerless)) {
    const root = posix.join(parent, name);
    try {
      // The placeholder directory is mode 000: a server that is not root could not empty it.
      await chmod(posix.join(root, 'dir'), 0o700).catch(() => undefined);
      await rm(root, { recursive: true, force: true });
      swept++;
    } catch (err) {
      log.debug({ err, root }, 'could not remove the deny-read placeholders of an ended server');
    }
  }
  if (swept > 0)
    log.info({ swept, parent }, 'removed the deny-read placeholders of servers that ended without removing them');
  return swept;
}
