/**
 * Sessions made of what a backend kept: containers re-adopted after a restart or taken over
 * from another replica of a fleet (`recover()`, `FleetBackend.takeOver`), and sessions restored
 * from a live template or a fork, whose processes run on under their ids and seqs.
 */
import type { BackendSession, RecoveredSession } from '../backends/types.ts';
import type { Config } from '../config.ts';
import { restoreEgress } from '../egress/session-egress.ts';
import type { Logger } from '../logger.ts';
import { approvedCommandsOf, fromSessionRecord, exposedPortsOf, revokedTokensOf } from './session-spec.ts';
import { Session, type SessionDeps } from './session.ts';

/** What re-adoption needs of the session manager. */
export interface AdoptionHost {
  readonly config: Config;
  readonly deps: SessionDeps;
  readonly log: Logger;
  /** Makes the session known (before its processes are adopted, so clients can find it). */
  register(session: Session): void;
  /** Removes a kept session that cannot be adopted, tried again on failure (session-removal.ts). */
  discard(session: BackendSession): Promise<void>;
}

/** Makes a session of what the backend kept; undefined when it had to go. */
export async function adoptRecovered(recovered: RecoveredSession, host: AdoptionHost): Promise<Session | undefined> {
  const { log } = host;
  const spec = fromSessionRecord(recovered.record, host.config);
  if (spec === undefined) {
    // Without its record the session's policy is unknown; re-adopting it under defaults
    // could widen its sandbox or drop its deny-read list. It goes instead.
    log.warn({ sessionId: recovered.session.id }, 'recovered session has no readable record: removing it');
    await host.discard(recovered.session);
    return undefined;
  }
  const session = new Session(
    recovered.session.id,
    recovered.tenant,
    spec,
    recovered.session,
    host.deps,
    recovered.createdAt,
  );
  session.tokens.restore(revokedTokensOf(recovered.record));
  session.ports.restore(exposedPortsOf(recovered.record));
  session.approvalCache.restore(approvedCommandsOf(recovered.record));
  await restoreEgress(session, recovered.session, log);
  host.register(session);
  // Running and ended processes the backend kept (docker's exec agent): seqs continue.
  session.processes.adopting = true;
  const processes = await recovered
    .adoptProcesses?.((kept, process) => session.processes.adopt(kept, process))
    .catch((err: unknown) => {
      log.warn({ sessionId: session.id, err }, 'cannot re-adopt the processes of a recovered session');
      return 0;
    });
  session.processes.adopting = false;
  // Its idle clock goes on from the previous server's last note (an idle session taken over
  // is not kept for another whole idle timeout).
  const notedAt = recovered.notedAt?.();
  if (notedAt !== undefined) session.restoreActivity(notedAt);
  log.info({ sessionId: session.id, processes: processes ?? 0 }, 're-adopted session');
  return session;
}

/** Restored from a live template (or a fork): its processes run on, with their ids and seqs. */
export async function adoptRestored(session: Session, log: Logger): Promise<void> {
  const restored = session.backend.adoptRestored?.bind(session.backend);
  if (restored === undefined) return;
  session.processes.adopting = true;
  await restored((kept, process) => session.processes.adopt(kept, process))
    .catch((err: unknown) =>
      log.warn({ sessionId: session.id, err }, 'cannot adopt the processes of a restored session'),
    )
    .finally(() => (session.processes.adopting = false));
}
