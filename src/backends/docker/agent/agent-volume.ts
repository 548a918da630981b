/**
 * The exec agent in a read-only volume each engine holds once, mounted at the agent's directory
 * of every container, instead of an archive upload of the binary into each container (an engine
 * call and the binary's size written into every writable layer). The volume is named after the
 * binary's digest, so servers of one build share it and another build gets its own; a second,
 * empty volume marks it complete (a server that died while filling it leaves no marker, and the
 * next one fills it again). Filling takes a created, never started container of the image.
 */
import { createHash, randomUUID } from 'node:crypto';
import type Docker from 'dockerode';
import { statusOf, withDeadline } from '../engine/engine-client.ts';
import type { DockerLogger } from '../options.ts';
import { AGENT_DIR, AGENT_PATH } from './agent-connection.ts';
import { agentArchive, agentBinary } from './agent-install.ts';

/** After a failure (image missing, engine refuses volumes) containers get the upload for this long. */
const RETRY_MS = 30_000;

export class AgentVolume {
  readonly #docker: Docker;
  readonly #binaryPath: string | undefined;
  readonly #timeoutMs: number;
  readonly #log: DockerLogger;
  #ready: Promise<string> | undefined;
  #failedAt = -Infinity;

  constructor(docker: Docker, binaryPath: string | undefined, timeoutMs: number, log: DockerLogger) {
    this.#docker = docker;
    this.#binaryPath = binaryPath;
    this.#timeoutMs = timeoutMs;
    this.#log = log;
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

  async #ensure(image: string): Promise<string> {
    const binary = await agentBinary(this.#binaryPath);
    // Never leaves: caught above, logged, and the agent is copied into each container instead.
    if (binary === undefined) throw new Error('the exec agent is not built');
    const name = `exec-server-agent-${createHash('sha256').update(binary).digest('hex').slice(0, 24)}`;
    const marker = `${name}-complete`;
    if (await this.#exists(marker)) return name;
    await this.#call('volume create', (abortSignal) =>
      this.#docker.createVolume({ Name: name, Labels: { 'exec-server.agent': 'true' }, abortSignal }),
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
      this.#docker.createVolume({ Name: marker, Labels: { 'exec-server.agent': 'true' }, abortSignal }),
    );
    this.#log.info({ volume: name }, 'exec agent volume ready');
    return name;
  }

  async #exists(volume: string): Promise<boolean> {
    try {
      await this.#call('volume inspect', (abortSignal) => this.#docker.getVolume(volume).inspect({ abortSignal }));
      return true;
    } catch (err) {
      if (statusOf((err as { cause?: unknown }).cause) === 404) return false;
      throw err;
    }
  }

  #call<T>(what: string, fn: (abortSignal: AbortSignal) => Promise<T>): Promise<T> {
    return withDeadline(what, this.#timeoutMs * 4, fn);
  }
}
