/**
 * A user of its own for each local session's sandboxed commands, when the server runs as root.
 *
 * Sandboxed commands used to run as root without capabilities: the owner of every root file
 * (so /etc/shadow was readable and a deny-read placeholder could be chmodded), and the same
 * user as every other session's commands. As a user of its own, a session's commands can read
 * only what that user may, cannot signal, trace or open /proc entries of other sessions'
 * processes, and RLIMIT_NPROC (counted per user) bounds how many processes the session has.
 *
 * Uids are taken from a range no distribution hands out (default 2,000,000,000 and up) and
 * claimed with a file per uid in a root-only directory, so that several servers on one host
 * never share one: a claim names the server's pid and start time, and a claim whose server is
 * gone is taken over. The group id is the uid; there are no supplementary groups.
 */
import { mkdir, open, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { execError } from '../../errors.ts';

/** A sandbox user's ids. */
export interface SandboxUser {
  readonly uid: number;
  readonly gid: number;
}

/** Where claims live: cleared at boot (a tmpfs), root-only. */
const DEFAULT_CLAIM_DIR = '/run/exec-server/sandbox-users';
/** First uid of the range sandbox users are taken from, far above the ids a system hands out. */
export const DEFAULT_UID_BASE = 2_000_000_000;
const UID_COUNT = 1_000_000;

/** This process's start time in clock ticks since boot (field 22 of /proc/PID/stat). */
async function startTime(pid: number): Promise<string | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  if (stat === undefined) return undefined;
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
}

/** Hands out uids of a reserved range, one per workspace, that no other server on this host holds at once. */
export class SandboxUsers {
  readonly #dir: string;
  readonly #base: number;
  readonly #self: string;
  #next = 0;

  private constructor(dir: string, base: number, self: string) {
    this.#dir = dir;
    this.#base = base;
    this.#self = self;
  }

  /** Undefined unless the server is root (only root can run commands as another user). */
  static async create(base = DEFAULT_UID_BASE, dir = DEFAULT_CLAIM_DIR): Promise<SandboxUsers | undefined> {
    if (process.getuid?.() !== 0) return undefined;
    await mkdir(dir, { recursive: true, mode: 0o700 });
    return new SandboxUsers(dir, base, `${process.pid} ${(await startTime(process.pid)) ?? '?'}\n`);
  }

  /** A uid no other session of any server on this host holds. */
  async claim(): Promise<SandboxUser> {
    for (let tries = 0; tries < UID_COUNT; tries++) {
      const uid = this.#base + (this.#next++ % UID_COUNT);
      if (await this.#take(join(this.#dir, String(uid)))) return { uid, gid: uid };
    }
    throw execError('EXEC_ERR_SESSION_LIMIT', 'no sandbox user is free');
  }

  async #take(path: string): Promise<boolean> {
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        const handle = await open(path, 'wx', 0o600);
        await handle.writeFile(this.#self);
        await handle.close();
        return true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      const [pid, started] = (await readFile(path, 'utf8').catch(() => '')).trim().split(' ');
      const alive = pid !== undefined && /^\d+$/.test(pid) && (await startTime(Number(pid))) === started;
      if (alive) return false;
      await rm(path, { force: true });
    }
    return false;
  }

  /** Gives the uid back (the session is gone, and so are its processes). */
  async release(user: SandboxUser): Promise<void> {
    await rm(join(this.#dir, String(user.uid)), { force: true });
  }
}
