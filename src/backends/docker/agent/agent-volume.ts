/**
 * The exec agent in a read-only volume each engine holds once, mounted at the agent's directory
 * of every container, instead of an archive upload of the binary into each container (an engine
 * call and the binary's size written into every writable layer). The volume is named after the
 * binary's digest, so servers of one build share it and another build gets its own; a second,
 * empty volume marks it complete (a server that died while filling it leaves no marker, and the
 * next one fills it again). Filling takes a created, never started container of the image.
 *
 * Every build leaves a volume on every engine, so once its own is ready a server removes the
 * other builds' volumes that nothing mounts: the engine refuses to remove a volume a container
 * mounts (a session's, a pool's, or the instance lease of a live server of that build, which
 * mounts its build's volume for this reason: instance-lease.ts), so the engine, not a clock,
 * decides what is still in use. A volume is removed before its marker; a volume made again
 * empty after a removal (a container's mount makes a missing volume) is newer than its marker
 * and is filled again rather than trusted.
 */
import { createHash, randomUUID } from 'node:crypto';
import type Docker from 'dockerode';
import { statusOf, withDeadline } from '../engine/engine-client.ts';
import type { PinnedVolume } from '../engine/instance-lease.ts';
import type { DockerLogger } from '../options.ts';
import { AGENT_DIR, AGENT_PATH } from './agent-connection.ts';
import { agentArchive, agentBinary } from './agent-install.ts';

/** After a failure (image missing, engine refuses volumes) containers get the upload for this long. */
const RETRY_MS = 30_000;
/** The label of every agent volume and marker (what the sweep lists). */
const LABELS: Readonly<Record<string, string>> = { 'exec-server.agent': 'true' };
const MARKER_SUFFIX = '-complete';

const markerOf = (name: string): string => `${name}${MARKER_SUFFIX}`;

/** The engine's read-only volume holding the agent binary, filled once per build and mounted in every container. */
export class AgentVolume {
  readonly #docker: Docker;
  readonly #binaryPath: string | undefined;
  readonly #timeoutMs: number;
  readonly #log: DockerLogger;
  #name: Promise<string | undefined> | undefined;
  #ready: Promise<string> | undefined;
  #failedAt = -Infinity;
  /** The sweep of other builds' volumes started when this one became ready (tests wait for it). */
  swept: Promise<void> = Promise.resolve();

  constructor(docker: Docker, binaryPath: string | undefined, timeoutMs: number, log: DockerLogger) {
    this.#docker = docker;
    this.#binaryPath = binaryPath;
    this.#timeoutMs = timeoutMs;
    this.#log = log;
  }

  /** This build's volume, for the lease to mount (undefined: the agent is not built). */
  async pin(): Promise<PinnedVolume | undefined> {
    const name = await this.#volumeName();
    return name === undefined ? undefined : { name, labels: LABELS };
  }

  /** The volume's name, filled from a container of `image`; undefined: upload into each container. */
  async get(image: string): Promise<string | undefined> {
    if (Date.now() - this.#failedAt < RETRY_MS) return undefined;
    this.#ready ??= this.#ensure(image);
    try {
      return await this.#ready;
    } catch (err) {
      this.#ready = undefined;
      this.#failedAt = Date.now();
      this.#log.warn(
        { err: (err as Error).message },
        'the exec agent volume cannot be made; the agent is copied into each container for now',
      );
      return undefined;
    }
  }

  #volumeName(): Promise<string | undefined> {
    this.#name ??= agentBinary(this.#binaryPath).then((binary) =>
      binary === undefined
        ? undefined
        : `exec-server-agent-${createHash('sha256').update(binary).digest('hex').slice(0, 24)}`,
    );
    return this.#name;
  }

  async #ensure(image: string): Promise<string> {
    const [binary, name] = await Promise.all([agentBinary(this.#binaryPath), this.#volumeName()]);
    // Never leaves: caught above, logged, and the agent is copied into each container instead.
    if (binary === undefined || name === undefined) throw new Error('the exec agent is not built');
    if (!(await this.#filled(name))) await this.#fill(name, binary, image);
    this.swept = this.#sweep(name).catch((err: unknown) => {
      this.#log.warn({ err: (err as Error).message }, "the other builds' exec agent volumes were not swept");
    });
    return name;
  }

  /** Whether `name` holds the agent: its marker is there, and the volume is not newer than it. */
  async #filled(name: string): Promise<boolean> {
    const [volume, marker] = await Promise.all([this.#createdAt(name), this.#createdAt(markerOf(name))]);
    // Both to the second; a volume filled and marked within one second has equal times.
    return volume !== undefined && marker !== undefined && volume <= marker;
  }

  async #fill(name: string, binary: Buffer, image: string): Promise<void> {
    // A marker older than its volume must go: making it again would keep its old time.
    await this.#remove(markerOf(name));
    await this.#call('volume create', (abortSignal) =>
      this.#docker.createVolume({ Name: name, Labels: { ...LABELS }, abortSignal }),
    );
    const filler = await this.#call('container create', (abortSignal) =>
      this.#docker.createContainer({
        name: `exec-server-agent-fill-${randomUUID()}`,
        Image: image,
        Entrypoint: [],
        Cmd: [AGENT_PATH, 'version'],
        NetworkDisabled: true,
        HostConfig: {
          Mounts: [{ Type: 'volume', Source: name, Target: AGENT_DIR }],
          LogConfig: { Type: 'none', Config: {} },
        },
        abortSignal,
      }),
    );
    try {
      const archive = await agentArchive(binary);
      await this.#call('agent fill', (abortSignal) => filler.putArchive(archive, { path: '/', abortSignal }));
    } finally {
      await filler.remove({ force: true }).catch(() => undefined);
    }
    await this.#call('volume create', (abortSignal) =>
      this.#docker.createVolume({ Name: markerOf(name), Labels: { ...LABELS }, abortSignal }),
    );
    this.#log.info({ volume: name }, 'exec agent volume ready');
  }

  /** Removes the agent volumes of other builds that no container mounts, each before its marker. */
  async #sweep(current: string): Promise<void> {
    const listed = await this.#call('volume list', (abortSignal) =>
      this.#docker.listVolumes({
        filters: { label: Object.entries(LABELS).map(([k, v]) => `${k}=${v}`) },
        abortSignal,
      }),
    );
    const others = new Set((listed.Volumes ?? []).map((v) => v.Name));
    others.delete(current);
    others.delete(markerOf(current));
    const removed: string[] = [];
    for (const name of others) {
      if (name.endsWith(MARKER_SUFFIX) || !(await this.#remove(name))) continue;
      await this.#remove(markerOf(name));
      removed.push(name);
    }
    // Markers whose volume is gone (a sweep that stopped between the two).
    for (const name of others)
      if (name.endsWith(MARKER_SUFFIX) && !others.has(name.slice(0, -MARKER_SUFFIX.length))) await this.#remove(name);
    if (removed.length > 0)
      this.#log.info({ removed }, 'removed the exec agent volumes of other builds, which nothing mounted');
  }

  /** When volume `name` was made (ms, to the second), or undefined when there is none. */
  async #createdAt(name: string): Promise<number | undefined> {
    try {
      const info = await this.#call('volume inspect', (abortSignal) =>
        this.#docker.getVolume(name).inspect({ abortSignal }),
      );
      return Date.parse((info as { CreatedAt?: string }).CreatedAt ?? '') || 0;
    } catch (err) {
      if (statusOf((err as { cause?: unknown }).cause) === 404) return undefined;
      throw err;
    }
  }

  /** Removes volume `name`: true when it is gone (or was), false when a container mounts it. */
  async #remove(name: string): Promise<boolean> {
    try {
      await this.#call('volume remove', (abortSignal) => this.#docker.getVolume(name).remove({ abortSignal }));
      return true;
    } catch (err) {
      const status = statusOf((err as { cause?: unknown }).cause);
      if (status === 404) return true;
      if (status === 409) return false;
      throw err;
    }
  }

  #call<T>(what: string, fn: (abortSignal: AbortSignal) => Promise<T>): Promise<T> {
    return withDeadline(what, this.#timeoutMs * 4, fn);
  }
}
