import type { ContainerAdopter } from './container/recovery.ts';
import { asSessionId, asTenantId } from '../../ids.ts';
import type { RecoveredSession } from '../types.ts';
import type { DockerSession } from './docker-session.ts';
import type { ContainerEvent } from './engine/event-watcher.ts';
import type { AgentLinks } from './agent/agent-links.ts';
import type { InstanceLease } from './engine/instance-lease.ts';
import { type DockerFleet, linkDirsOf, sessionOfContainer } from './fleet.ts';
import type { HibernatableSession } from './checkpoints/hibernation.ts';
import type { DockerLogger, ResolvedDockerOptions } from './options.ts';
import type { RuntimeResolver } from './engine/runtimes.ts';
import type { WarmPool } from './container/warm-pool.ts';
import type { TemplatePools } from './checkpoints/template-pool.ts';
import { LABEL } from './container/labels.ts';

/** In a fleet, link directories younger than this are not swept (another replica may be making its container). */
const FLEET_SWEEP_MIN_AGE_MS = 10 * 60_000;

/** What recovery and the events watcher use of the docker backend. */
export interface RecoveryHost extends ContainerAdopter {
  readonly options: ResolvedDockerOptions;
  readonly log: DockerLogger;
  readonly runtimes: Pick<RuntimeResolver, 'check'>;
  readonly lease: Pick<InstanceLease, 'acquireForRecovery'>;
  readonly agentLinks: Pick<AgentLinks, 'sweep' | 'release'>;
  readonly fleet: Pick<DockerFleet, 'recoveryOwners' | 'sweepClaims' | 'registry'> | undefined;
  /** The backend's sessions by container id, and the same as handed out (behind the hibernation gate). */
  readonly sessions: ReadonlyMap<string, DockerSession>;
  readonly gated: ReadonlyMap<string, Pick<HibernatableSession, 'expectsStop'>>;
  readonly pools: ReadonlyMap<string, Pick<WarmPool, 'forget'>>;
  /** Pools of containers restored from live templates (template-pool.ts). */
  readonly templates: Pick<TemplatePools, 'forget'>;
  removeContainer(containerId: string): Promise<void>;
}

/**
 * Startup: takes the instance's lease, re-adopts its running and hibernated containers, removes
 * the rest (in a fleet, those of live replicas are left alone) and sweeps stale link directories.
 */
export async function recover(host: RecoveryHost): Promise<RecoveredSession[]> {
  // A default runtime the engine lacks is a configuration error, reported at startup.
  await host.runtimes.check();
  // Nothing is adopted or removed before this server holds the instance: another live server
  // with the same id keeps its sessions (it is waited for, then this one fails to start).
  await host.lease.acquireForRecovery(host.options.defaultImage, await host.listOwn());
  const list = await host.listOwn();
  // A replica of a fleet leaves the containers of live replicas alone and claims the others.
  const owners = host.fleet === undefined ? undefined : await host.fleet.recoveryOwners();
  const recovered: RecoveredSession[] = [];
  const keepDirs = new Set<string>();
  for (const c of list) {
    const { sessionId, tenant } = sessionOfContainer(c);
    if (owners !== undefined && !(await owners(c, sessionId))) {
      for (const dir of linkDirsOf(c)) keepDirs.add(dir);
      continue;
    }
    if (c.State === 'exited' && sessionId !== undefined && tenant !== undefined && !host.sessions.has(c.Id)) {
      const hibernated = await host.adoptHibernated(c, asSessionId(sessionId), asTenantId(tenant));
      if (hibernated !== undefined) {
        recovered.push(hibernated);
        continue;
      }
    }
    if (c.State !== 'running' || sessionId === undefined || tenant === undefined || host.sessions.has(c.Id)) {
      if (host.sessions.has(c.Id)) continue;
      const pooled = sessionId === undefined && c.Labels?.[LABEL.pool] === 'true';
      // A warm-pool container this server made before, or one of a replica that is gone: no session.
      host.log.info(
        { containerId: c.Id, state: c.State },
        pooled ? 'recover: removing a warm-pool container nobody holds' : 'recover: removing orphan container',
      );
      await host
        .removeContainer(c.Id)
        .catch((err: unknown) => host.log.warn({ err: (err as Error).message }, 'recover: remove failed'));
      continue;
    }
    const adopted = await host.adoptRunning(c, asSessionId(sessionId), asTenantId(tenant));
    if (adopted !== undefined) recovered.push(adopted);
  }
  if (host.fleet !== undefined) for (const c of await host.listOwn()) for (const d of linkDirsOf(c)) keepDirs.add(d);
  await host.agentLinks.sweep(keepDirs, host.fleet === undefined ? 0 : FLEET_SWEEP_MIN_AGE_MS);
  await host.fleet?.sweepClaims().catch(() => undefined);
  return recovered;
}

/** One event of the engine's about a container of the instance. */
export function onEvent(
  host: Pick<RecoveryHost, 'log' | 'gated' | 'pools' | 'templates' | 'agentLinks' | 'sessions' | 'fleet'>,
  e: ContainerEvent,
): void {
  if (e.action === 'oom') {
    host.log.warn({ containerId: e.containerId }, 'session container hit its memory limit');
    return;
  }
  // A checkpoint stops the container on purpose.
  if (e.action === 'die' && host.gated.get(e.containerId)?.expectsStop === true) return;
  for (const pool of host.pools.values()) pool.forget(e.containerId);
  host.templates.forget(e.containerId);
  if (e.action === 'destroy') host.agentLinks.release(e.containerId);
  const session = host.sessions.get(e.containerId);
  // The owner of a deleted session removes its claims (recovery sweeps what is left).
  if (e.action === 'destroy' && session !== undefined)
    void host.fleet?.registry.removeClaims(session.id).catch(() => undefined);
  if (session === undefined || session.destroying) return;
  const code = e.attributes.exitCode;
  session.markLost(
    e.action === 'destroy'
      ? 'container was removed'
      : `container died${code === undefined ? '' : ` (exit code ${code})`}`,
  );
}

/** After an events gap: anything that died meanwhile is lost. */
export async function reconcile(host: Pick<RecoveryHost, 'sessions' | 'gated'>): Promise<void> {
  for (const s of [...host.sessions.values()]) {
    if (s.destroying || s.lostReason !== undefined || host.gated.get(s.containerId)?.expectsStop === true) continue;
    const running = await s.containerRunning();
    if (running === false) s.markLost('container is not running');
  }
}
