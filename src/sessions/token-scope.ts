/**
 * A caller as the gates and the audit see it (docs/architecture.md, "Session tokens"): the
 * principal, a session token's scope, and whether that scope still opens its session (not
 * expired, not revoked, its session still there). Minting and verifying tokens is the
 * transport's (src/transport/session-tokens.ts); this is what a session's gates need of them,
 * the HTTP hooks, the preview proxy and the JSON-RPC connection alike.
 */
import { execError, type ExecServerError } from '../errors.ts';
import type { TenantId } from '../ids.ts';
import type { TokenAccess } from '../protocol/index.ts';
import type { Session } from './session.ts';

/** What a verified session token grants. */
export interface TokenScope {
  readonly tenant: TenantId;
  readonly sessionId: string;
  readonly access: TokenAccess;
  readonly tokenId: string;
  /** Seconds since the epoch. */
  readonly expiresAt: number;
}

/** Who is calling: a tenant, and the scope of the session token it used, if any. */
export interface Principal {
  readonly tenant: TenantId;
  /** For the audit log: `tenant:NAME` or `session-token:ID`; never a token. */
  readonly name: string;
  /** Present for a session token. */
  readonly scope?: TokenScope | undefined;
}

/** Where a scope's session is: here, or (in a fleet) served by another replica. */
export interface ScopeLookup {
  /** The session of this id on this server (any tenant), if it exists. */
  readonly findSession: (id: string) => Session | undefined;
  /**
   * Fleet: whether the session of this id is served by another replica (which checks the
   * token's revocations itself when the request reaches it).
   */
  readonly servedElsewhere?: ((sessionId: string) => boolean) | undefined;
}

/** The error a session token gets now (expired, revoked, its session gone), or undefined. */
export function scopeProblem(scope: TokenScope, deps: ScopeLookup): ExecServerError | undefined {
  if (scope.expiresAt * 1000 <= Date.now())
    return execError('EXEC_ERR_TOKEN_EXPIRED', `session token ${scope.tokenId} expired`, {
      detail: { tokenId: scope.tokenId },
    });
  const session = deps.findSession(scope.sessionId);
  if (session === undefined && deps.servedElsewhere?.(scope.sessionId) === true) return undefined;
  if (session === undefined || session.tenant !== scope.tenant)
    return execError(
      'EXEC_ERR_TOKEN_REVOKED',
      `session token ${scope.tokenId}: its session is not on this server (deleted)`,
      {
        detail: { tokenId: scope.tokenId },
      },
    );
  if (session.tokens.has(scope.tokenId))
    return execError('EXEC_ERR_TOKEN_REVOKED', `session token ${scope.tokenId} was revoked`, {
      detail: { tokenId: scope.tokenId },
    });
  return undefined;
}
