/**
 * Which user a local workspace's sandboxed commands run as, and lending the workspace to it.
 *
 * Where the server runs as root, each workspace gets a user of its own (sandbox-users.ts); the
 * sessions of one workspace (a client may open several on the same directory) share it, since
 * they share the files anyway. A workspace owned by an ordinary user is used as that user
 * instead: nothing needs to change hands. A root-owned workspace is lent: what in it is not
 * the sandbox user's becomes the sandbox user's before a sandboxed command runs (again after
 * something running as root may have written there), and goes back to the workspace's owner
 * when its last session ends. Extra writable roots of the session's policy that root owns are
 * lent the same way. System directories (`/`, `/etc`, `/usr`, ...) are never lent: sandboxed
 * commands then cannot write there, which is what a sandbox should mean for them. Nor is a
 * directory whose path someone but root could re-point (fixedPath): the chown follows the path.
 */
import { execFile } from 'node:child_process';
import { realpath, stat } from 'node:fs/promises';
import { posix } from 'node:path';
import { promisify } from 'node:util';
import type { SandboxUser, SandboxUsers } from './sandbox-users.ts';
import { isWithin } from '../../path-within.ts';

const run = promisify(execFile);
/** chown of a large tree: bounded like any other engine call. */
const CHOWN_TIMEOUT_MS = 120_000;

const SYSTEM_DIRS = /^\/(bin|boot|dev|etc|lib[^/]*|proc|run|sbin|sys|usr|snap)(\/|$)/;
const SYSTEM_ROOTS = new Set([
  '/',
  '/home',
  '/media',
  '/mnt',
  '/opt',
  '/root',
  '/srv',
  '/tmp',
  '/var',
  '/var/tmp',
  '/var/lib',
  '/var/cache',
  '/var/log',
]);

/** `path` with symlinks and `..` resolved as far as it exists, the missing rest kept as spelled. */
export async function canonicalPath(path: string): Promise<string> {
  const rest: string[] = [];
  for (let dir = posix.resolve(path); ; dir = posix.dirname(dir)) {
    const real = await realpath(dir).catch(() => undefined);
    if (real !== undefined) return posix.join(real, ...rest);
    if (dir === posix.dirname(dir)) return posix.resolve(path);
    rest.unshift(posix.basename(dir));
  }
}

/**
 * Whether `path` is `dir`, lies in it or holds it, once both are canonical: such a path given
 * as a workspace or writable root would hand every session's files below `dir` to one sandbox user.
 */
export async function overlaps(path: string, dir: string): Promise<boolean> {
  const [p, d] = await Promise.all([canonicalPath(path), canonicalPath(dir)]);
  return isWithin(p, d) || isWithin(d, p);
}

/** Whether `path` may be handed to a sandbox user (no system directory, no top-level root). */
export function lendable(path: string): boolean {
  return !SYSTEM_ROOTS.has(path) && !SYSTEM_DIRS.test(path);
}

/** The sandbox user of one workspace, shared by its sessions. */
export interface WorkspaceUser extends SandboxUser {
  /**
   * Makes everything in the workspace the sandbox user's (no-op when it is not lent), and the
   * extra writable roots given that root owns; `again`: also what was lent before.
   */
  lend(extraRoots: readonly string[], again: boolean): Promise<void>;
  /** Whether files written into the workspace by the server must be handed to the sandbox user. */
  readonly lent: boolean;
  /** The workspace's canonical path. */
  readonly path: string;
}

interface Entry {
  readonly user: WorkspaceUser;
  readonly original: { uid: number; gid: number };
  readonly claimed: boolean;
  readonly serverMade: boolean;
  /** Extra roots lent, with their owners before. */
  readonly extras: Map<string, { uid: number; gid: number }>;
  sessions: number;
}

async function ownerOf(path: string): Promise<number | undefined> {
  return (await stat(path).catch(() => undefined))?.uid;
}

/**
 * Whether no one but root can make `path` lead elsewhere: it names no symlink, and every directory
 * above it is root's and closed to others' writes (or sticky: others cannot move root's entries).
 * Otherwise a sandbox user owning a directory above it (a workspace lent before, `ws/x/y`) could
 * re-point it (`x -> /opt`) between any check and the chown, which would then hand over `/opt/y`.
 */
async function fixedPath(path: string): Promise<boolean> {
  if ((await realpath(path).catch(() => undefined)) !== posix.normalize(path)) return false;
  for (let dir = posix.dirname(path); ; dir = posix.dirname(dir)) {
    const st = await stat(dir).catch(() => undefined);
    if (st?.uid !== 0 || ((st.mode & 0o022) !== 0 && (st.mode & 0o1000) === 0)) return false;
    if (dir === posix.dirname(dir)) return true;
  }
}

/** Chowns to `to` what in `path` passes `test`; nothing where `path` is not fixed (fixedPath). */
async function chownWhere(path: string, test: string[], to: string): Promise<void> {
  if (!(await fixedPath(path))) return;
  await run('find', [path, '-xdev', ...test, '-exec', 'chown', '-h', to, '{}', '+'], {
    timeout: CHOWN_TIMEOUT_MS,
    maxBuffer: 1024 * 1024,
  });
}

/** Which user each workspace's sandboxed commands run as, and the workspace lent to it and given back. */
export class WorkspaceUsers {
  readonly #users: SandboxUsers | undefined;
  /** Where the server keeps every session's workspace and private /tmp: never lent whole. */
  readonly #reserved: string;
  readonly #entries = new Map<string, Entry>();

  constructor(users: SandboxUsers | undefined, reserved: string) {
    this.#users = users;
    this.#reserved = reserved;
  }

  /**
   * The user for a session on `workdir` (undefined where the server is not root: commands run
   * as the server's own user). `serverMade`: the server created the directory for this session.
   */
  async acquire(workdir: string, serverMade: boolean): Promise<WorkspaceUser | undefined> {
    if (!this.#users) return undefined;
    const path = await realpath(workdir);
    const existing = this.#entries.get(path);
    if (existing) {
      existing.sessions++;
      return existing.user;
    }
    const st = await stat(path);
    const extras = new Map<string, { uid: number; gid: number }>();
    const reserved = this.#reserved;
    let entry: Entry;
    if (st.uid !== 0) {
      const user: WorkspaceUser = { uid: st.uid, gid: st.gid, path, lent: false, lend: async () => undefined };
      entry = { user, original: st, claimed: false, serverMade, extras, sessions: 1 };
    } else {
      const claimed = await this.#users.claim();
      const lent = serverMade || lendable(path);
      const to = `${claimed.uid}:${claimed.gid}`;
      const notOurs = ['!', '-user', String(claimed.uid)];
      const user: WorkspaceUser = {
        ...claimed,
        path,
        lent,
        lend: async (extraRoots, again) => {
          if (lent && (again || (await ownerOf(path)) !== claimed.uid)) await chownWhere(path, notOurs, to);
          for (const root of extraRoots) {
            const owner = await ownerOf(root);
            // Someone else's now (made again, or chowned): lend it afresh.
            if (extras.has(root) && !again && owner === claimed.uid) continue;
            if (!extras.has(root)) {
              const rst = await stat(root).catch(() => undefined);
              if (rst?.uid !== 0 || !lendable(root)) continue; // gone, or not root's
              if (!(await fixedPath(root))) continue; // could be re-pointed elsewhere
              if (await overlaps(root, reserved)) continue; // other sessions' files are in it
              extras.set(root, { uid: rst.uid, gid: rst.gid });
            }
            if (owner !== undefined) await chownWhere(root, notOurs, to);
          }
        },
      };
      entry = { user, original: st, claimed: true, serverMade, extras, sessions: 1 };
    }
    this.#entries.set(path, entry);
    return entry.user;
  }

  /** One session of the workspace has ended; the last one gives it back to its owner. */
  async release(user: WorkspaceUser): Promise<void> {
    const entry = this.#entries.get(user.path);
    if (!entry || --entry.sessions > 0) return;
    this.#entries.delete(user.path);
    if (!entry.claimed) return;
    const back = async (path: string, owner: { uid: number; gid: number }): Promise<void> => {
      await chownWhere(path, ['-user', String(user.uid)], `${owner.uid}:${owner.gid}`).catch(() => undefined);
    };
    if (user.lent && !entry.serverMade) await back(user.path, entry.original);
    for (const [root, owner] of entry.extras) await back(root, owner);
    await this.#users!.release(user);
  }
}
