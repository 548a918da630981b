/**
 * What a session's parts (its files, disk watch, resource use) see of the session that owns
 * them: narrow views that `Session` implements, so those modules need not import it (and
 * `session.ts`, which makes them, imports nothing that imports it back).
 */
import type { AuditEvent } from '../audit/auditor.ts';
import type { BackendSession } from '../backends/types.ts';
import type { ResolvedSessionSpec } from './session-spec.ts';

export type SessionStatus = { readonly status: 'alive' } | { readonly status: 'dead'; readonly reason: string };

/** The session as every part sees it. */
export interface SessionCore {
  readonly backend: BackendSession;
  readonly status: SessionStatus;
  readonly spec: ResolvedSessionSpec;
}

/** What the file operations use of their session (files/session-files.ts). */
export interface FilesSession extends SessionCore {
  /** Client paths that stand for the workspace. */
  readonly workspaceAliases: readonly string[];
  /** Throws `EXEC_ERR_SESSION_DEAD` once the session lost its backend. */
  assertAlive(): void;
  /** Where a path the client names lives in this session. */
  mapClientPath(path: string): string;
  /** Records an audit event of this session. */
  audit(event: AuditEvent): void;
}
