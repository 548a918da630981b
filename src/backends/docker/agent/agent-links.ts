/**
 * The server's side of agent links (agent-link.ts): one private directory and listener per
 * container under `root/<instance>` (the instance's part so that servers sharing a root never
 * sweep each other's), made before the container and removed when the engine reports it
 * destroyed.
 *
 * Whether the directory is shared with the engine's host is found out, never assumed: the
 * engine refuses to create a container whose bind source it does not have (then containers are
 * made without the mount from that point on), and an agent that does not connect back falls
 * back to the attached exec.
 */
import { createHash, randomBytes } from 'node:crypto';
import { lstat, mkdir, readdir, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type Docker from 'dockerode';
import { AGENT_SOCKET } from '../exec/scripts.ts';
import { AgentLink, removeLinkDir } from './agent-link.ts';
import { LEGACY_AGENT_MOUNT, LINK_MOUNT } from '../container/container-config.ts';
import type { DockerLogger } from '../options.ts';

/** How the server reaches one container's agent: the link when it has one, else an attach to `path`. */
export interface AgentSocket {
  /** The daemon's own socket inside the container (for `exec-agent attach` through the engine). */
  readonly path: string;
  /** The server's listener the agent connects out to. */
  readonly link?: AgentLink | undefined;
}

/** An engine's refusal of a bind source it does not have (the directory is not shared). */
export function isBindSourceMissing(err: unknown): boolean {
  const message = String((err as Error | undefined)?.message ?? '');
  return /bind source path does not exist|invalid mount config/i.test(message);
}

/** The server's agent links: one private directory and listener per container, swept when it is gone. */
export class AgentLinks {
  readonly #base: string | undefined;
  readonly #log: DockerLogger;
  /** Container id → its directory (and link, when it has one of this design). */
  readonly #byContainer = new Map<string, { dir: string; link?: AgentLink | undefined }>();
  #refused: string | undefined;
  #checked: Promise<string | undefined> | undefined;

  /** `root` undefined: links are off (every connection goes through an exec). */
  constructor(root: string | undefined, instanceId: string, log: DockerLogger) {
    this.#log = log;
    this.#base =
      root === undefined ? undefined : join(root, createHash('sha256').update(instanceId).digest('hex').slice(0, 8));
  }

  /** A fresh link for one new container; undefined when there is none to give. */
  async make(): Promise<AgentLink | undefined> {
    const base = this.#base;
    if (base === undefined || this.#refused !== undefined) return undefined;
    this.#checked ??= this.#checkBase(base);
    if ((await this.#checked) !== undefined) return undefined;
    return AgentLink.create(join(base, randomBytes(6).toString('hex')), this.#log);
  }

  /** The engine does not have the link's directory: later containers are made without the mount. */
  refuse(link: AgentLink, reason: string): void {
    this.discard(link);
    if (this.#refused !== undefined) return;
    this.#refused = `the engine does not share the server's agent link directory: ${reason}`;
    this.#log.info(
      { reason },
      "the engine's host does not share the agent link directory; exec agents are reached through the engine",
    );
  }

  /** A link made for a container that the engine did not create. */
  discard(link: AgentLink): void {
    link.close();
    void removeLinkDir(link.dir);
  }

  /** `link` belongs to `containerId` from now until the container is destroyed. */
  track(containerId: string, link: AgentLink): void {
    this.#byContainer.set(containerId, { dir: link.dir, link });
  }

  /**
   * How to reach the agent of a re-adopted container. A container of this design has its link
   * directory mounted read-only: the server listens there again. One made by an earlier server
   * (the agent's own socket on a writable mount) is reached through the engine only: the
   * server never opens a path its container could have rewritten.
   */
  async adopt(containerId: string, info: Docker.ContainerInspectInfo): Promise<AgentSocket> {
    const mounts = info.Mounts ?? [];
    const linked = mounts.find((m) => m.Destination === LINK_MOUNT && m.Type === 'bind' && m.RW === false);
    const legacy = mounts.find((m) => m.Destination === LEGACY_AGENT_MOUNT && m.Type === 'bind');
    if (legacy !== undefined && dirname(legacy.Source) === this.#base)
      this.#byContainer.set(containerId, { dir: legacy.Source });
    if (legacy !== undefined) return { path: `${LEGACY_AGENT_MOUNT}/agent.sock` };
    if (linked === undefined) return { path: AGENT_SOCKET };
    const dir = dirname(linked.Source);
    if (this.#base === undefined || dirname(dir) !== this.#base) {
      this.#log.warn({ containerId, source: linked.Source }, 'agent link directory is not this server’s: not reopened');
      return { path: AGENT_SOCKET };
    }
    try {
      const link = await AgentLink.reopen(dir, this.#log);
      this.#byContainer.set(containerId, { dir, link });
      return { path: AGENT_SOCKET, link };
    } catch (err) {
      this.#byContainer.set(containerId, { dir });
      this.#log.warn({ containerId, err: (err as Error).message }, 'cannot reopen an agent link: through the engine');
      return { path: AGENT_SOCKET };
    }
  }

  /** The container is gone: its listener and directory go too. */
  release(containerId: string): void {
    const entry = this.#byContainer.get(containerId);
    if (entry === undefined) return;
    this.#byContainer.delete(containerId);
    entry.link?.close();
    void removeLinkDir(entry.dir);
  }

  /** The server stops: every listener closes (directories stay for containers that stay). */
  closeAll(): void {
    for (const entry of this.#byContainer.values()) entry.link?.close();
  }

  /**
   * After recovery: directories of containers that no longer exist are removed. `keep`: those of
   * containers other live replicas of a fleet hold (they share this directory on one host);
   * `minAgeMs`: younger directories stay (a replica makes one before its container exists).
   */
  async sweep(keep: ReadonlySet<string> = new Set(), minAgeMs = 0): Promise<void> {
    if (this.#base === undefined) return;
    const kept = new Set([...this.#byContainer.values()].map((e) => e.dir).concat([...keep]));
    const names = await readdir(this.#base).catch(() => [] as string[]);
    const old = async (d: string): Promise<boolean> =>
      minAgeMs === 0 ||
      Date.now() -
        (await lstat(d).then(
          (st) => st.mtimeMs,
          () => Date.now(),
        )) >=
        minAgeMs;
    await Promise.all(
      names
        .map((n) => join(this.#base as string, n))
        .filter((d) => !kept.has(d))
        .map(async (d) => {
          if (await old(d)) await rm(d, { recursive: true, force: true });
        }),
    );
  }

  /**
   * The base directory, made private to the server; a directory that is not (another owner, or
   * open to others) is refused, since others could then reach or replace the listeners.
   */
  async #checkBase(base: string): Promise<string | undefined> {
    try {
      await mkdir(base, { recursive: true, mode: 0o700 });
      const st = await lstat(base);
      const uid = process.getuid?.() ?? st.uid;
      if (!st.isDirectory() || st.uid !== uid || (st.mode & 0o077) !== 0)
        this.#refused = `${base} is not a directory private to the server (owner ${st.uid}, mode ${(st.mode & 0o777).toString(8)})`;
    } catch (err) {
      this.#refused = `cannot make ${base}: ${(err as Error).message}`;
    }
    if (this.#refused !== undefined)
      this.#log.warn({ reason: this.#refused }, 'exec agents are reached through the engine');
    return this.#refused;
  }
}
