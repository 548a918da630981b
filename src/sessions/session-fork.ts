/**
 * Forks of a session (`POST /v1/sessions/{id}/fork`, `session/fork`; docs/snapshots.md): a
 * snapshot of the source, with its memory when asked (a live template: the source is stopped
 * for the checkpoint only), then `count` sessions of the source's spec made from it. With
 * memory, each fork is restored from the checkpoint: every process of the source runs on in it
 * under the same id, its output seq going on from the fork point. Each fork is a session of its
 * own: new id, container, tokens (none), preview ports (none) and audit trail.
 */
import type { SnapshotInfo } from '../backends/types.ts';
import type { ResolvedSessionSpec } from './session-spec.ts';
import type { Session } from './session.ts';

/** A fork's outcome: the snapshot the forks were made from, and the new sessions. */
export interface ForkResult {
  readonly snapshot: SnapshotInfo;
  readonly sessions: Session[];
}

/** Forks `source`: one snapshot, then `count` sessions from it; a failure removes those already made. */
export async function forkSession(
  source: Session,
  o: { readonly count: number; readonly memory: boolean; readonly name: string | undefined },
  launch: (spec: ResolvedSessionSpec) => Promise<Session>,
  remove: (s: Session) => Promise<void>,
): Promise<ForkResult> {
  const snapshot = await source.snapshot(o.name, o.memory);
  // The source's runtime as it runs (its spec may have left it to the server's default).
  const runtime = source.backend.runtime ?? source.spec.runtime;
  const spec: ResolvedSessionSpec = {
    ...source.spec,
    snapshot: snapshot.snapshotId,
    ...(runtime !== undefined ? { runtime } : {}),
  };
  const made = await Promise.allSettled(Array.from({ length: o.count }, () => launch(spec)));
  const sessions = made.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failed = made.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed !== undefined) {
    await Promise.all(sessions.map((s) => remove(s)));
    throw failed.reason;
  }
  source.audit({
    action: 'session.fork',
    detail: { snapshot: snapshot.snapshotId, memory: o.memory, forks: sessions.map((s) => s.id) },
  });
  return { snapshot, sessions };
}
