/**
 * The environment a local session's sandbox user can use: what it cannot search is left out of
 * PATH, and a HOME it cannot search becomes /tmp. Checked per session, reused for a few seconds.
 */
import { stat } from 'node:fs/promises';
import { posix } from 'node:path';

/** How long what a sandbox user can search (PATH entries, HOME) is reused. */
const PATH_CACHE_MS = 5_000;

/** Whether `user` may search `dir` and each of its parents (mode bits only). */
async function searchable(dir: string, user: { uid: number; gid: number }): Promise<boolean> {
  for (let d = dir; ; d = posix.dirname(d)) {
    const st = await stat(d).catch(() => undefined);
    if (!st) return false;
    const bit = st.uid === user.uid ? 0o100 : st.gid === user.gid ? 0o010 : 0o001;
    if ((st.mode & bit) === 0) return false;
    if (d === posix.dirname(d)) return true;
  }
}

/** The environment of one session's sandbox user, with its cache of what that user can search. */
export class SandboxEnvironment {
  readonly #user: { uid: number; gid: number };
  readonly #paths = new Map<string, { value: string; at: number }>();

  constructor(user: { uid: number; gid: number }) {
    this.#user = user;
  }

  /**
   * The environment as the sandbox user can use it. PATH loses the entries that user cannot
   * search (a root server's PATH often names directories under a closed /root): a shell would
   * report a missing command there as "Permission denied" instead of "not found". A HOME it
   * cannot search (the client's `/root`) becomes the session's /tmp, as the docker backend's
   * falls back for its sandbox user: otherwise every login shell starts with "Permission
   * denied" on its profile and git, npm or pip fail on their caches.
   */
  async adjust(env: Readonly<Record<string, string>>): Promise<Readonly<Record<string, string>>> {
    const user = this.#user;
    const path = env['PATH'];
    const home = env['HOME'];
    const next: Record<string, string> = {};
    if (path !== undefined) {
      const value = await this.#cached(`path:${path}`, async () => {
        const dirs = path.split(':');
        const ok = await Promise.all(
          dirs.map((d) => (d === '' || !d.startsWith('/') ? Promise.resolve(true) : searchable(d, user))),
        );
        return dirs.filter((_, i) => ok[i]).join(':');
      });
      if (value !== path) next['PATH'] = value;
    }
    if (home?.startsWith('/')) {
      const value = await this.#cached(`home:${home}`, async () => ((await searchable(home, user)) ? home : '/tmp'));
      if (value !== home) next['HOME'] = value;
    }
    return Object.keys(next).length === 0 ? env : { ...env, ...next };
  }

  async #cached(key: string, compute: () => Promise<string>): Promise<string> {
    const hit = this.#paths.get(key);
    if (hit && Date.now() - hit.at <= PATH_CACHE_MS) return hit.value;
    const value = await compute();
    if (this.#paths.size > 16) this.#paths.clear();
    this.#paths.set(key, { value, at: Date.now() });
    return value;
  }
}
