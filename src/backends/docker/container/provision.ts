/**
 * Provisioning of one session (or pool) container: create, start, set up, with the container
 * removed again when any step fails, and a pull when the image is missing locally.
 */
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import type { BackendSessionSpec } from '../../types.ts';
import { buildContainerConfig } from './container-config.ts';
import { isStorageOptUnsupported, type StorageOptSupport } from './disk.ts';
import { statusOf, withDeadline } from '../engine/engine-client.ts';
import { runControl } from '../exec/exec-runner.ts';
import type { DockerLogger, ResolvedDockerOptions } from '../options.ts';
import { SETUP_SCRIPT } from '../exec/scripts.ts';
import type { PoolEntry } from './warm-pool.ts';
import type { ImageFacts } from './image-facts.ts';
import { AgentChannel } from '../agent/agent-channel.ts';
import { agentBinary, agentPresent, installAgent } from '../agent/agent-install.ts';
import { AGENT_SOCKET } from '../exec/scripts.ts';
import { type AgentLinks, type AgentSocket, isBindSourceMissing } from '../agent/agent-links.ts';
import type { AgentLink } from '../agent/agent-link.ts';

/** Create and start can be slow on busy hosts (vfs storage); a dead engine still fails at once. */
const PROVISION_TIMEOUT_MS = 60_000;

/** What provisioning needs; the same path serves sessions and pool containers. */
export interface ProvisionInput {
  readonly name: string;
  readonly image: string;
  /** Pulls the image when it is missing; undefined for snapshots (they only exist locally). */
  readonly pull: (() => Promise<void>) | undefined;
  readonly labels: Record<string, string>;
  readonly resources: BackendSessionSpec['resources'];
  readonly network: boolean;
  readonly workdir: string;
  /** OCI runtime of the container (runtimes.ts). */
  readonly runtime?: string | undefined;
  /** Whether the engine limits writable layers (asked at the first create, then cached). */
  readonly storage?: StorageOptSupport | undefined;
  /** Agent links (the server's listeners); undefined: the agent is reached through the engine. */
  readonly agentLinks?: AgentLinks | undefined;
  /** The engine's agent volume for this image (agent-volume.ts); undefined: upload the agent. */
  readonly agentVolume?: ((image: string) => Promise<string | undefined>) | undefined;
  /** Shell and environment of images already seen (image-facts.ts): no setup exec nor inspect. */
  readonly imageFacts?: ImageFacts | undefined;
  /**
   * Starts the created container from a memory checkpoint instead of afresh (a live template,
   * a fork): the agent is in its image and running in its memory already.
   */
  readonly restore?: ((container: Docker.Container) => Promise<void>) | undefined;
}

/** Creates, starts and sets up one container (pulling its image when missing); removes it if a step fails. */
export async function provisionContainer(
  docker: Docker,
  options: ResolvedDockerOptions,
  log: DockerLogger,
  p: ProvisionInput,
): Promise<PoolEntry> {
  const agentVolume = options.execPath === 'agent' ? await p.agentVolume?.(p.image) : undefined;
  const { container, engineLimit, link } = await createContainer(docker, options, log, p, agentVolume);
  try {
    const installed = await startOrRestore(container, options, p.restore, agentVolume);
    const facts = p.imageFacts?.get(p.image) ?? (await learnImage(container, options, p));
    const agent =
      installed === true
        ? await startAgent(container, options, log, { path: AGENT_SOCKET, link })
        : { agentUnavailable: installed };
    return { containerId: container.id, ...facts, diskEnforcement: engineLimit ? 'engine' : 'watch', ...agent };
  } catch (err) {
    await removeContainer(docker, container.id).catch(() => undefined);
    throw err;
  }
}

/**
 * The container create, with what the engine may refuse at it handled: a missing image (pulled,
 * then created again), a link directory its host lacks, a disk limit its storage cannot apply.
 * Returns the agent link the container got (undefined when none).
 */
async function createContainer(
  docker: Docker,
  options: ResolvedDockerOptions,
  log: DockerLogger,
  p: ProvisionInput,
  agentVolume: string | undefined,
): Promise<{ container: Docker.Container; engineLimit: boolean; link: AgentLink | undefined }> {
  const diskMb = p.resources.diskMb ?? options.defaultResources.diskMb;
  let link = options.execPath === 'agent' ? await p.agentLinks?.make() : undefined;
  const configOf = (engineLimit: boolean): Docker.ContainerCreateOptions =>
    buildContainerConfig({
      name: p.name,
      image: p.image,
      labels: p.labels,
      memoryMb: p.resources.memoryMb,
      cpus: p.resources.cpus,
      pids: p.resources.pids,
      network: p.network,
      workdir: p.workdir,
      controlTmpfsSize: options.controlTmpfsSize,
      runtime: p.runtime,
      diskMb: engineLimit ? diskMb : undefined,
      agentLinkDir: link?.mountSource,
      agentVolume,
    });
  const createOnce = (config: Docker.ContainerCreateOptions): Promise<Docker.Container> =>
    withDeadline('container create', PROVISION_TIMEOUT_MS, (abortSignal) =>
      docker.createContainer({ ...config, abortSignal }),
    );
  // The engine refuses a bind source its host lacks: the link directory is not shared, and
  // this container (and every later one) is made without it (agent-links.ts).
  const create = async (config: Docker.ContainerCreateOptions): Promise<Docker.Container> => {
    try {
      return await createOnce(config);
    } catch (err) {
      if (link === undefined || !isBindSourceMissing(err)) throw err;
      p.agentLinks?.refuse(link, (err as Error).message);
      link = undefined;
      const Mounts = config.HostConfig?.Mounts?.filter((m) => m.Type !== 'bind');
      return createOnce({ ...config, HostConfig: { ...config.HostConfig, Mounts } });
    }
  };
  // The engine refuses StorageOpt at create when its storage driver cannot apply it: the
  // refusal is remembered and the container made without, its limit left to the disk watch.
  const createLimited = async (): Promise<{ container: Docker.Container; engineLimit: boolean }> => {
    if (p.storage?.wanted !== true) return { container: await create(configOf(false)), engineLimit: false };
    try {
      return { container: await create(configOf(true)), engineLimit: true };
    } catch (err) {
      if (!isStorageOptUnsupported(err)) throw err;
      if (p.storage.refused((err as Error).message))
        log.info(
          { reason: (err as Error).message },
          "the engine cannot limit a container's disk (StorageOpt size); session disk limits are enforced by the disk watch",
        );
      return { container: await create(configOf(false)), engineLimit: false };
    }
  };
  try {
    let created: { container: Docker.Container; engineLimit: boolean };
    try {
      created = await createLimited();
    } catch (err) {
      if (p.pull === undefined || statusOf((err as { cause?: unknown }).cause) !== 404) throw err;
      await p.pull();
      created = await createLimited();
    }
    if (link !== undefined) p.agentLinks?.track(created.container.id, link);
    return { ...created, link };
  } catch (err) {
    if (link !== undefined) p.agentLinks?.discard(link);
    throw err;
  }
}

/**
 * The first container of an image: the setup exec (the layout, made at create since, again,
 * and the shell) and its environment, remembered for the next containers of the image.
 */
async function learnImage(container: Docker.Container, options: ResolvedDockerOptions, p: ProvisionInput) {
  const setup = await runControl(container, {
    cmd: ['/bin/sh', '-c', SETUP_SCRIPT, 'sh', p.workdir],
    timeoutMs: PROVISION_TIMEOUT_MS,
  });
  if (setup.exitCode !== 0)
    throw execError('EXEC_ERR_BACKEND', `session container setup failed: ${setup.stderr.trim()}`);
  const info = await withDeadline('container inspect', options.engineTimeoutMs, (abortSignal) =>
    container.inspect({ abortSignal }),
  );
  const facts = { shellPath: setup.stdout.toString('utf8').trim() || '/bin/sh', baseEnv: envOf(info.Config.Env) };
  p.imageFacts?.set(p.image, facts);
  return facts;
}

/**
 * Installs the agent (before the start: the archive API writes into the container's own
 * filesystem then) and starts the container; or restores it from a memory checkpoint, whose
 * image holds the agent already. true when the agent is there, else why not.
 */
async function startOrRestore(
  container: Docker.Container,
  options: ResolvedDockerOptions,
  restore: ProvisionInput['restore'],
  agentVolume: string | undefined,
): Promise<true | string> {
  if (restore !== undefined) {
    await restore(container);
    return options.execPath === 'exec' ? 'the server runs with one engine exec per command (execPath exec)' : true;
  }
  // Before the start: the archive API writes into the container's own filesystem then; with the
  // engine's agent volume mounted there is nothing to write.
  const installed =
    agentVolume !== undefined && (await agentBinary(options.agentBinary)) !== undefined
      ? true
      : await installIfWanted(container, options);
  await withDeadline('container start', PROVISION_TIMEOUT_MS, (abortSignal) => container.start({ abortSignal }));
  return installed;
}

/** true when the agent is in the container, else why not. */
export async function installIfWanted(
  container: Docker.Container,
  options: ResolvedDockerOptions,
  o: { running?: boolean } = {},
): Promise<true | string> {
  if (options.execPath === 'exec') return 'the server runs with one engine exec per command (execPath exec)';
  const binary = await agentBinary(options.agentBinary);
  if (binary === undefined)
    return 'the exec agent is not built (build/exec-agent; npm ci builds it with a C compiler and libc6-dev)';
  // A running container may have its agent running: the file stays (it may be busy).
  if (o.running === true && (await agentPresent(container, options.engineTimeoutMs))) return true;
  try {
    await installAgent(container, binary, options.engineTimeoutMs);
    return true;
  } catch (err) {
    return `cannot copy the exec agent into the container: ${(err as Error).message}`;
  }
}

/**
 * Attaches to a freshly installed agent (which starts it). When it cannot run there (another
 * architecture, a noexec root), the session falls back to one exec per command.
 */
export async function startAgent(
  container: Docker.Container,
  options: ResolvedDockerOptions,
  log: DockerLogger,
  socket: AgentSocket,
): Promise<Pick<PoolEntry, 'agent' | 'agentUnavailable'>> {
  const agent = new AgentChannel({
    container,
    socket,
    timeoutMs: options.engineTimeoutMs,
    retentionBytes: options.retentionBytes,
    windowBytes: options.agentWindowBytes,
    ptyPinning: options.ptyPinning,
    log,
  });
  try {
    try {
      await agent.connection();
    } catch (err) {
      // A running agent that was dialling the link again (its server died) may reach a listener
      // just reopened here before `start` tells it to dial anew, and drop that first connection
      // for the next one: one more attempt takes the next one.
      if (socket.link === undefined) throw err;
      log.info({ containerId: container.id, err: (err as Error).message }, 'agent link: attaching once more');
      await agent.connection();
    }
    return { agent };
  } catch (err) {
    agent.close('agent did not start');
    const reason = `the exec agent does not start in this container: ${(err as Error).message}`;
    log.warn({ containerId: container.id, reason }, 'session falls back to one engine exec per command');
    return { agentUnavailable: reason };
  }
}

/** Force-removes a container (and its anonymous volumes); already gone is fine. */
export async function removeContainer(docker: Docker, containerId: string): Promise<void> {
  try {
    await withDeadline('container remove', 30_000, (abortSignal) =>
      docker.getContainer(containerId).remove({ force: true, v: true, abortSignal }),
    );
  } catch (err) {
    if (statusOf((err as { cause?: unknown }).cause) !== 404) throw err;
  }
}

/** The image's environment as an exec sees it (what `envPolicy.inherit` inherits), plus HOME. */
export function envOf(env: string[] | null | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const kv of env ?? []) {
    const i = kv.indexOf('=');
    if (i > 0) out[kv.slice(0, i)] = kv.slice(i + 1);
  }
  out.HOME ??= '/root';
  return out;
}
