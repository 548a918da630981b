/**
 * Answers after their audit lines (docs/security-guarded.md, "The audit log"): while the log is
 * healthy, nothing leaves the server before the audit lines recorded before it are written, so a
 * caller told that something was done (a session made, a process started, a file written) finds
 * it in the log even if the server dies right after the answer. Kubernetes' API server does the
 * same in its `blocking` audit mode. A failing log holds nothing up (`Auditor.settled`).
 */
import type { Auditor } from './auditor.ts';

/**
 * The sends of one connection, in order, each after the audit lines recorded before it. A send
 * with nothing to wait for, the usual case, goes at once; otherwise it and every later send of
 * the connection take their turn, so a `process/start` reply that waits for its line is never
 * overtaken by the process's first `process/output`.
 */
export function auditBarrier(audit: Pick<Auditor, 'settled'>): (send: () => void) => void {
  let tail: Promise<void> | undefined;
  return (send) => {
    const lines = audit.settled();
    if (tail === undefined && lines === undefined) return send();
    const turn: Promise<void> = (tail ?? Promise.resolve())
      .then(() => lines)
      .then(() => {
        if (tail === turn) tail = undefined;
        send();
      })
      // A send that throws here has no caller left to tell (the socket went away meanwhile).
      .catch(() => undefined);
    tail = turn;
  };
}
