/**
 * Direct sockets to the exec agent (docs/docker-backend.md, "Direct agent sockets"). Through an
 * attached exec, every byte a command prints is copied by the engine's shim and by the engine
 * itself before the server reads it; on a two-core host those copies cap a stream below what
 * a plain `docker exec` reaches. Where the server and the engine share a filesystem (the
 * server on the engine's host, or a volume both mount at the same path, as the Helm chart's
 * engine sidecar does), each container gets a private directory of the server's bind-mounted
 * at AGENT_MOUNT: the daemon listens there and the server connects to it from its side.
 *
 * Whether the directory is shared is found out, never assumed: the engine refuses to create a
 * container whose bind source it does not have (then containers are made without the mount
 * from that point on), and a socket the server cannot open falls back to the attached exec.
 */
import { createHash, randomBytes } from 'node:crypto';
import { lstat, mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { AGENT_SOCKET } from './agent-channel.ts';
import { AGENT_MOUNT } from './container-config.ts';
import type { DockerLogger } from './options.ts';

const SOCKET_NAME = 'agent.sock';

/** The daemon's socket of one container, inside it and, when shared, as the server sees it. */
export interface AgentSocket {
  readonly path: string;
  readonly hostPath?: string | undefined;
}

/** The agent's socket of an existing container: on its shared directory if it has one. */
export function agentSocketOf(info: Docker.ContainerInspectInfo): AgentSocket & { readonly dir?: string } {
  const mount = info.Mounts?.find((m) => m.Destination === AGENT_MOUNT && m.Type === 'bind');
  return mount === undefined
    ? { path: AGENT_SOCKET }
    : { path: `${AGENT_MOUNT}/${SOCKET_NAME}`, hostPath: join(mount.Source, SOCKET_NAME), dir: mount.Source };
}

/** An engine's refusal of a bind source it does not have (the directory is not shared). */
export function isBindSourceMissing(err: unknown): boolean {
  const message = String((err as Error | undefined)?.message ?? '');
  return /bind source path does not exist|invalid mount config/i.test(message);
}

/**
 * The server's side of the shared directories: one private directory per container under
 * `root/<instance>` (the instance's part so that servers sharing a root never sweep each
 * other's), made before the container and removed when the engine reports it destroyed.
 */
export class AgentSocketDirs {
  readonly #base: string | undefined;
  readonly #log: DockerLogger;
  readonly #byContainer = new Map<string, string>();
  #refused: string | undefined;
  #checked: Promise<string | undefined> | undefined;

  /** `root` undefined: direct sockets are off (every connection goes through an exec). */
  constructor(root: string | undefined, instanceId: string, log: DockerLogger) {
    this.#log = log;
    this.#base =
      root === undefined ? undefined : join(root, createHash('sha256').update(instanceId).digest('hex').slice(0, 8));
  }

  /** A fresh private directory for one new container; undefined when there is none to give. */
  async make(): Promise<string | undefined> {
    const base = this.#base;
    if (base === undefined || this.#refused !== undefined) return undefined;
    this.#checked ??= this.#checkBase(base);
    if ((await this.#checked) !== undefined) return undefined;
    const dir = join(base, randomBytes(6).toString('hex'));
    await mkdir(dir, { mode: 0o700 });
    return dir;
  }

  /** The engine does not have `dir`: later containers are made without the mount. */
  refuse(dir: string, reason: string): void {
    this.discard(dir);
    if (this.#refused !== undefined) return;
    this.#refused = `the engine does not share the server's agent socket directory: ${reason}`;
    this.#log.info(
      { reason },
      "the engine's host does not share the agent socket directory; exec agents are reached through the engine",
    );
  }

  /** A directory made for a container that the engine did not create. */
  discard(dir: string): void {
    void rm(dir, { recursive: true, force: true });
  }

  /** `dir` belongs to `containerId` from now until the container is destroyed. */
  track(containerId: string, dir: string): void {
    this.#byContainer.set(containerId, dir);
  }

  /** The agent's socket of a re-adopted container; its directory is kept until it is gone. */
  adopt(containerId: string, info: Docker.ContainerInspectInfo): AgentSocket {
    const { dir, ...socket } = agentSocketOf(info);
    if (dir !== undefined) this.track(containerId, dir);
    return socket;
  }

  /** The container is gone: its directory goes too. */
  release(containerId: string): void {
    const dir = this.#byContainer.get(containerId);
    if (dir === undefined) return;
    this.#byContainer.delete(containerId);
    void rm(dir, { recursive: true, force: true });
  }

  /** After recovery: directories of containers that no longer exist are removed. */
  async sweep(): Promise<void> {
    if (this.#base === undefined) return;
    const kept = new Set(this.#byContainer.values());
    const names = await readdir(this.#base).catch(() => [] as string[]);
    await Promise.all(
      names
        .map((n) => join(this.#base as string, n))
        .filter((d) => !kept.has(d))
        .map((d) => rm(d, { recursive: true, force: true })),
    );
  }

  /**
   * The base directory, made private to the server; a directory that is not (another owner, or
   * open to others) is refused, since a socket there would let others reach the agents.
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
