/**
 * What the rest of the server sees of the audit log: `Auditor.record(event)`. Who acts comes
 * from `actorStore`, an AsyncLocalStorage the HTTP hook and the WebSocket message handler enter
 * with the authenticated caller, so code deep in a session records its caller without passing
 * it along; events without one (the reaper, a process exit) carry `system` or the actor they
 * captured at the start.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

/** Who did it: never a token, only its name (`tenant:NAME`) or a session token's id. */
export interface AuditActor {
  readonly tenant?: string | undefined;
  readonly principal: string;
  readonly remote?: string | undefined;
}

export interface AuditEvent {
  readonly action: string;
  readonly tenant?: string | undefined;
  readonly session?: string | undefined;
  readonly detail?: Record<string, unknown> | undefined;
  /** Overrides the current actor (a process exit carries its starter's). */
  readonly actor?: AuditActor | undefined;
}

export interface Auditor {
  readonly enabled: boolean;
  record(event: AuditEvent): void;
  /**
   * Undefined when every line recorded so far is written, or when none can be now (the log is
   * failing, which `/readyz` and the metrics say): then nothing waits for it. Otherwise resolves
   * once they are written. An answer waits for it (audit-barrier.ts), so a caller told that
   * something was done finds it in the log, even if the server dies right after.
   */
  settled(): Promise<void> | undefined;
}

export const actorStore = new AsyncLocalStorage<AuditActor>();

/** The caller of the code running now, if any. */
export function currentActor(): AuditActor | undefined {
  return actorStore.getStore();
}

/** The auditor of a server without `--audit-log`. */
export const NO_AUDIT: Auditor = { enabled: false, record: () => undefined, settled: () => undefined };

/** `env` with every value replaced: variable names may matter to an auditor, values may be secrets. */
export function redactEnv(env: Record<string, unknown> | undefined): Record<string, string> | undefined {
  if (env === undefined) return undefined;
  return Object.fromEntries(Object.keys(env).map((k) => [k, '[redacted]']));
}
