/**
 * Re-adoption of one container of the instance as a session: at startup (recovery) and when a
 * replica of a fleet takes over a session whose owner is gone (fleet.ts). The agent kept running
 * with the container, so attaching to it finds its processes and their unacknowledged output.
 */
import type Docker from 'dockerode';
import type { SessionId, TenantId } from '../../../ids.ts';
import type { RecoveredSession } from '../../types.ts';
import { AgentChannel } from '../agent/agent-channel.ts';
import type { AgentLinks } from '../agent/agent-links.ts';
import { readHibernatedFacts } from '../checkpoints/checkpoints.ts';
import type { HibernatableSession } from '../checkpoints/hibernation.ts';
import { withDeadline } from '../engine/engine-client.ts';
import type { RuntimeResolver } from '../engine/runtimes.ts';
import { runControl } from '../exec/exec-runner.ts';
import { RECORD_FILE, SETUP_SCRIPT } from '../exec/scripts.ts';
import type { DockerLogger, ResolvedDockerOptions } from '../options.ts';
import { enforcementOf } from './disk.ts';
import { LABEL, readUserLabels } from './labels.ts';
import { envOf, installIfWanted, startAgent } from './provision.ts';
import type { PoolEntry } from './warm-pool.ts';
import { execError } from '../../../errors.ts';

/**
 * The most of a session record read back. A record lists up to 10,000 revoked tokens
 * (MAX_TOKEN_REVOCATIONS, ~40 bytes each) besides its spec: read with a 64 KiB bound, a session
 * past ~1,600 revocations failed the read and was removed at the next start, container and all.
 */
const MAX_RECORD_BYTES = 4 * 1024 * 1024;

/** Re-adopts containers of the instance as sessions: recovery at start and a fleet's take-over. */
export interface ContainerAdopter {
  /** This instance's containers on the engine. */
  listOwn(): Promise<Docker.ContainerInfo[]>;
  adoptRunning(c: Docker.ContainerInfo, sessionId: SessionId, tenant: TenantId): Promise<RecoveredSession | undefined>;
  adoptHibernated(
    c: Docker.ContainerInfo,
    sessionId: SessionId,
    tenant: TenantId,
  ): Promise<RecoveredSession | undefined>;
}

/** A container to make a session object of, and the session it holds. */
export interface Adoption {
  readonly id: SessionId;
  readonly tenant: TenantId;
  readonly entry: PoolEntry;
  readonly image: string;
  readonly workdir: string;
  readonly runtime: string;
  /** Set when the container is stopped with this server's checkpoint in it (a hibernated session). */
  readonly hibernated?: { at: Date; checkpoint: string } | undefined;
}

/** What re-adoption needs of the docker backend. */
export interface AdoptHost {
  readonly docker: Docker;
  readonly options: ResolvedDockerOptions;
  readonly log: DockerLogger;
  readonly agentLinks: AgentLinks;
  readonly runtimes: RuntimeResolver;
  /** Makes the session object of a container (the backend's own bookkeeping included). */
  adopt(adoption: Adoption): Promise<HibernatableSession>;
  removeContainer(containerId: string): Promise<void>;
}

/** The image, workspace and runtime of an own container's session, from its labels and inspection. */
async function placementOf(
  host: AdoptHost,
  c: Docker.ContainerInfo,
  info: Docker.ContainerInspectInfo,
): Promise<Pick<Adoption, 'image' | 'workdir' | 'runtime'>> {
  const labels = c.Labels ?? {};
  return {
    image: labels[LABEL.pool] === 'true' ? host.options.defaultImage : c.Image,
    workdir: labels[LABEL.workdir] ?? host.options.defaultWorkdir,
    runtime: info.HostConfig.Runtime ?? (await host.runtimes.engine()).engineDefault,
  };
}

/** The facts of a re-adopted session that its container's labels and inspection keep. */
function recoveredFacts(
  c: Docker.ContainerInfo,
  info: Docker.ContainerInspectInfo,
): Pick<RecoveredSession, 'labels' | 'createdAt'> {
  const labels = c.Labels ?? {};
  return { labels: readUserLabels(labels), createdAt: new Date(labels[LABEL.created] ?? info.Created) };
}

/**
 * Re-adopts one running container of the instance (recovery, or a fleet replica taking over a
 * session whose owner is gone); removes it when it cannot be adopted (undefined then).
 */
export async function adoptRunning(
  host: AdoptHost,
  c: Docker.ContainerInfo,
  sessionId: SessionId,
  tenant: TenantId,
): Promise<RecoveredSession | undefined> {
  const labels = c.Labels ?? {};
  const workdir = labels[LABEL.workdir] ?? host.options.defaultWorkdir;
  try {
    const container = host.docker.getContainer(c.Id);
    // Idempotent: also tells the shell and proves the container still runs commands.
    const setup = await runControl(container, {
      cmd: ['/bin/sh', '-c', SETUP_SCRIPT, 'sh', workdir],
      timeoutMs: host.options.engineTimeoutMs,
    });
    if (setup.exitCode !== 0) throw execError('EXEC_ERR_BACKEND', setup.stderr.trim());
    const info = await withDeadline('container inspect', host.options.engineTimeoutMs, (abortSignal) =>
      container.inspect({ abortSignal }),
    );
    // The agent kept running with the container: attaching finds it (and its processes).
    const installed = await installIfWanted(container, host.options, { running: true });
    const socket = await host.agentLinks.adopt(c.Id, info);
    const agent =
      installed === true
        ? await startAgent(container, host.options, host.log, socket)
        : { agentUnavailable: installed };
    const session = await host.adopt({
      id: sessionId,
      tenant,
      entry: {
        containerId: c.Id,
        shellPath: setup.stdout.toString('utf8').trim() || '/bin/sh',
        baseEnv: envOf(info.Config.Env),
        diskEnforcement: enforcementOf(info),
        ...agent,
      },
      ...(await placementOf(host, c, info)),
    });
    const stored = await runControl(container, {
      cmd: ['cat', RECORD_FILE],
      timeoutMs: host.options.engineTimeoutMs,
      maxStdout: MAX_RECORD_BYTES,
    });
    const channel = session.inner.agent;
    host.log.info({ sessionId, containerId: c.Id }, 'recover: re-adopted session');
    return {
      session,
      tenant,
      ...recoveredFacts(c, info),
      record: stored.exitCode === 0 ? stored.stdout.toString('utf8') : undefined,
      notedAt: () => channel?.notedAt,
      // The agent's processes go on; commands run as engine execs end lost (exec-recovery.ts).
      adoptProcesses: async (adopt: Parameters<NonNullable<RecoveredSession['adoptProcesses']>>[0]) =>
        (channel ? await channel.recover(adopt) : 0) + (await session.inner.recoverExecProcesses(adopt)),
    };
  } catch (err) {
    host.log.warn({ containerId: c.Id, err: (err as Error).message }, 'recover: cannot re-adopt, removing');
    await host.removeContainer(c.Id).catch(() => undefined);
    return undefined;
  }
}

/**
 * A stopped container holding this server's checkpoint is a hibernated session: re-adopted
 * as it is, without waking it (the facts come through the archive API). Undefined when the
 * container holds no checkpoint (it died) or cannot be read.
 */
export async function adoptHibernated(
  host: AdoptHost,
  c: Docker.ContainerInfo,
  sessionId: SessionId,
  tenant: TenantId,
): Promise<RecoveredSession | undefined> {
  try {
    const container = host.docker.getContainer(c.Id);
    const facts = await readHibernatedFacts(container, host.options.engineTimeoutMs);
    if (facts === undefined) return undefined;
    const info = await withDeadline('container inspect', host.options.engineTimeoutMs, (abortSignal) =>
      container.inspect({ abortSignal }),
    );
    const session = await host.adopt({
      id: sessionId,
      tenant,
      entry: {
        containerId: c.Id,
        shellPath: facts.shellPath,
        baseEnv: envOf(info.Config.Env),
        diskEnforcement: enforcementOf(info),
        // The agent was checkpointed with the container: its channel attaches after the wake.
        ...(facts.execPath === 'agent'
          ? {
              agent: new AgentChannel({
                container,
                socket: await host.agentLinks.adopt(c.Id, info),
                timeoutMs: host.options.engineTimeoutMs,
                retentionBytes: host.options.retentionBytes,
                windowBytes: host.options.agentWindowBytes,
                ptyPinning: host.options.ptyPinning,
                log: host.log,
              }),
            }
          : { agentUnavailable: 'hibernated on the exec path' }),
      },
      ...(await placementOf(host, c, info)),
      hibernated: { at: new Date(info.State.FinishedAt), checkpoint: facts.checkpoint },
    });
    host.log.info(
      { sessionId, containerId: c.Id, processes: facts.agentProcesses },
      'recover: re-adopted hibernated session',
    );
    const channel = session.inner.agent;
    return {
      session,
      tenant,
      ...recoveredFacts(c, info),
      record: facts.record,
      // Processes the agent kept can only be handed over awake: such a session wakes now (an
      // idle hibernation has none, and stays asleep).
      ...(channel !== undefined && facts.agentProcesses > 0
        ? {
            adoptProcesses: async (adopt: Parameters<NonNullable<RecoveredSession['adoptProcesses']>>[0]) => {
              await session.wake();
              return channel.recover(adopt);
            },
          }
        : {}),
    };
  } catch (err) {
    host.log.warn(
      { containerId: c.Id, err: (err as Error).message },
      'recover: cannot read a stopped container as hibernated',
    );
    return undefined;
  }
}
