/**
 * The reaper's decisions: a session past its lifetime ends; an idle one (no client, nothing
 * running) ends after its idle timeout, or hibernates instead when the server hibernates idle
 * sessions and it can; a hibernated session is not reaped for idleness (only for its
 * lifetime); a dead one goes once its exited retention has passed.
 */
import type { Logger } from '../logger.ts';
import type { Session } from './session.ts';

/** What the reaper needs of the session manager. */
export interface ReapHost {
  /** `--idle-hibernate-seconds` in ms; 0: idle sessions are removed, never hibernated. */
  readonly hibernateAfterMs: number;
  readonly exitedRetentionMs: number;
  readonly log: Logger;
  remove(session: Session, why: string): Promise<void>;
}

/** One pass of the reaper over `sessions` at time `now`. */
export async function reapSessions(sessions: readonly Session[], host: ReapHost, now: number): Promise<void> {
  const { hibernateAfterMs } = host;
  for (const session of sessions) {
    const idleFor = now - session.lastActivity;
    const hibernation = session.backend.hibernation;
    const idle = !session.client && session.processes.runningCount === 0;
    const hibernates = hibernateAfterMs > 0 && hibernation !== undefined && hibernation.unsupportedReason === undefined;
    if (now >= session.expiresAt.getTime()) await host.remove(session, 'max lifetime reached');
    else if (session.status.status === 'alive' && hibernation !== undefined && hibernation.state !== 'awake') continue;
    else if (hibernates && idle && session.status.status === 'alive' && idleFor >= hibernateAfterMs)
      await hibernateIdle(session, host.log);
    else if (!hibernates && idle && idleFor >= session.spec.idleTimeoutSeconds * 1000)
      await host.remove(session, 'idle timeout');
    else if (session.status.status === 'dead' && !session.client && idleFor >= host.exitedRetentionMs)
      await host.remove(session, 'dead');
  }
}

async function hibernateIdle(session: Session, log: Logger): Promise<void> {
  try {
    await session.backend.hibernation?.hibernate();
    session.audit({ action: 'session.hibernate', detail: { why: 'idle' }, actor: { principal: 'system' } });
    log.info({ sessionId: session.id }, 'idle session hibernated');
  } catch (err) {
    // Tried again at the next idle check; the session stays as it was.
    session.touch();
    log.warn({ sessionId: session.id, err: (err as Error).message }, 'idle session could not hibernate');
  }
}
