/**
 * Picks and builds the backend from config. Docker is imported lazily so the local backend
 * (the default) never loads dockerode.
 */
import { runtimeList, warmPoolRuntimes, warmPoolTemplates, type Config } from '../config.ts';
import { fleetIdentity } from '../config/fleet.ts';
import type { Logger } from '../logger.ts';
import { createLocalBackend } from './local/local-backend.ts';
import type { Backend } from './types.ts';

async function createDocker(config: Config, log: Logger): Promise<Backend> {
  const { createDockerEngines, engineList, agentWindowFor } = await import('./docker/index.ts');
  // One engine, or a pool of them (`--docker-host a,b`): see docker/engine-pool.ts.
  return createDockerEngines(
    engineList(config.dockerHost),
    {
      defaultImage: config.image,
      instanceId: config.instanceId,
      fleet: fleetIdentity(config),
      defaultResources: { memoryMb: config.memoryMb, cpus: config.cpus, pids: config.pids, diskMb: config.diskMb },
      // In a fleet each replica keeps its own pools; what a replica that is gone left is removed
      // by the others (docker/fleet.ts, `sweep`).
      warmPoolSize: config.warmPool,
      warmPoolMax: config.warmPoolMax,
      warmPoolIdleMs: config.warmPoolIdleSeconds * 1000,
      createConcurrency: config.dockerCreateConcurrency,
      retentionBytes: config.outputRetentionBytes,
      ptyPinning: config.ptyPin,
      execPath: config.dockerExecPath,
      agentWindowBytes: agentWindowFor(config.wsBufferLimitBytes),
      agentSocketDir: config.dockerAgentSocketDir === 'off' ? undefined : config.dockerAgentSocketDir,
      runtime: config.runtime,
      allowedRuntimes: config.allowedRuntimes === undefined ? undefined : runtimeList(config.allowedRuntimes),
      warmPoolRuntimes: config.warmPoolRuntimes === undefined ? undefined : warmPoolRuntimes(config.warmPoolRuntimes),
      warmPoolTemplates:
        config.warmPoolTemplates === undefined ? undefined : warmPoolTemplates(config.warmPoolTemplates),
      checkpointDir: config.checkpointDir,
      checkpointMaxMb: config.checkpointMaxMb,
      maxSnapshotsPerTenant: config.maxSnapshotsPerTenant,
    },
    log.child({ backend: 'docker' }),
  );
}

/** Warns when a local engine's host cannot hold `--max-sessions` sessions (docker/engine/host-pids.ts). */
async function checkDockerHost(config: Config, log: Logger): Promise<void> {
  const { checkHostPids, engineList } = await import('./docker/index.ts');
  await checkHostPids(engineList(config.dockerHost), config.maxSessions, log);
}

/** `auto`: docker when an engine answers within its ping deadline, else local. */
export async function createBackend(config: Config, log: Logger): Promise<Backend> {
  if (config.backend === 'docker') {
    const docker = await createDocker(config, log);
    await checkDockerHost(config, log);
    return docker;
  }
  if (config.backend === 'auto') {
    const docker = await createDocker(config, log);
    try {
      await docker.ping();
      log.info({}, 'backend auto: docker engine answered');
      await checkDockerHost(config, log);
      return docker;
    } catch (err) {
      await docker.close();
      log.info({ reason: (err as Error).message }, 'backend auto: no docker engine, using local');
    }
  }
  // Without a token, anything that reaches the port may run commands: sandboxed commands get no network.
  const hasToken = config.token !== undefined || config.tokens !== undefined || config.tokensFile !== undefined;
  return createLocalBackend(
    { workspaceRoot: config.workspaceRoot, ptyPinning: config.ptyPin, sandboxNetwork: hasToken },
    log.child({ backend: 'local' }),
  );
}
