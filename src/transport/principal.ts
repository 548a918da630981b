/**
 * Who is calling: a tenant token (the whole tenant) or a session token (one session, `full` or
 * `read`). `identify` reads the bearer, `httpScopeError` decides whether a session token may
 * use an HTTP route, `READ_METHODS` which JSON-RPC methods a `read` token may call. Every refusal
 * carries a stable code (src/errors.ts): `EXEC_ERR_UNAUTHORIZED`, `EXEC_ERR_TOKEN_EXPIRED`,
 * `EXEC_ERR_TOKEN_REVOKED` (401); `EXEC_ERR_TOKEN_SCOPE`, `EXEC_ERR_TOKEN_READ_ONLY` (403).
 */
import { execError, type ExecServerError } from '../errors.ts';
import type { TenantId } from '../ids.ts';
import type { Session } from '../sessions/session.ts';
import type { Authenticator } from './auth.ts';
import { MCP_CALL_SUFFIX } from '../protocol/index.ts';
import { isSessionToken, type SessionTokenSigner, type TokenScope } from './session-tokens.ts';

export interface Principal {
  readonly tenant: TenantId;
  /** For the audit log: `tenant:NAME` or `session-token:ID`; never a token. */
  readonly name: string;
  /** Present for a session token. */
  readonly scope?: TokenScope | undefined;
}

export interface Identify {
  readonly auth: Authenticator;
  readonly signer: SessionTokenSigner;
  /** The session of this id on this server (any tenant), if it exists. */
  readonly findSession: (id: string) => Session | undefined;
  /**
   * Fleet: whether the session of this id is served by another replica (which checks the
   * token's revocations itself when the request reaches it).
   */
  readonly servedElsewhere?: ((sessionId: string) => boolean) | undefined;
}

/** The bearer of an `Authorization: Bearer X` header. */
export function bearerOf(header: string | undefined): string | undefined {
  const m = /^Bearer\s+(.+)$/i.exec(header ?? '');
  return m?.[1]?.trim();
}

/** The error a session token gets now (expired, revoked, its session gone), or undefined. */
export function scopeProblem(
  scope: TokenScope,
  deps: Pick<Identify, 'findSession' | 'servedElsewhere'>,
): ExecServerError | undefined {
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

/** The caller of `header`, or the 401 to answer. */
export function identify(header: string | undefined, deps: Identify): Principal | ExecServerError {
  const bearer = bearerOf(header);
  if (bearer !== undefined && isSessionToken(bearer)) {
    const scope = deps.signer.verify(bearer);
    if (!('tokenId' in scope)) return scope;
    const problem = scopeProblem(scope, deps);
    if (problem) return problem;
    return { tenant: scope.tenant, name: `session-token:${scope.tokenId}`, scope };
  }
  const tenant = deps.auth.authenticate(header);
  if (tenant === undefined) return execError('EXEC_ERR_UNAUTHORIZED', 'missing or invalid bearer token');
  return { tenant, name: `tenant:${tenant}` };
}

/** A path segment decoded, or undefined when its escapes are malformed (never a match then). */
function safeDecode(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

const SESSION_PATH = /^\/v1\/sessions\/([^/?#]+)(\/[^?#]*)?$/;

/**
 * Whether a session token may call `method path`: its own session's routes only (not token
 * minting), the WebSocket endpoint (initialize checks the session), and for `read` only GET.
 */
export function httpScopeError(
  scope: TokenScope,
  method: string,
  path: string,
  upgrade: boolean,
): ExecServerError | undefined {
  if (upgrade && (path === '/' || path === '/v1/ws')) return undefined;
  const m = SESSION_PATH.exec(path);
  if (!m || m[1] === undefined)
    return execError(
      'EXEC_ERR_TOKEN_SCOPE',
      `a session token opens only its session (${scope.sessionId}); ${method} ${path} needs a tenant token`,
    );
  if (safeDecode(m[1]) !== scope.sessionId)
    return execError('EXEC_ERR_TOKEN_SCOPE', `this token is scoped to session ${scope.sessionId}`);
  if ((m[2] ?? '').startsWith('/tokens'))
    return execError('EXEC_ERR_TOKEN_SCOPE', 'session tokens cannot create or revoke tokens; use a tenant token');
  // A fork makes new sessions, which a session token cannot open either.
  if ((m[2] ?? '') === '/fork')
    return execError(
      'EXEC_ERR_TOKEN_SCOPE',
      'session tokens cannot fork (a fork creates sessions); use a tenant token',
    );
  // MCP is for tenant tokens (`/mcp` refuses session tokens), so is the route replicas use to
  // run an MCP connection's tool call on a session's owner (src/mcp/forwarded-calls.ts).
  if ((m[2] ?? '') === MCP_CALL_SUFFIX)
    return execError('EXEC_ERR_TOKEN_SCOPE', 'session tokens cannot call MCP tools; use a tenant token');
  if (scope.access === 'read' && method !== 'GET' && method !== 'HEAD')
    return execError('EXEC_ERR_TOKEN_READ_ONLY', `a read token cannot ${method} ${path}`);
  return undefined;
}

/** JSON-RPC methods a `read` token may call: attach, replay output, read files, describe. */
export const READ_METHODS: ReadonlySet<string> = new Set([
  'initialize',
  'environment/info',
  'environmentConfig/read',
  'session/info',
  'process/read',
  'process/list',
  'fs/readFile',
  'fs/getMetadata',
  'fs/canonicalize',
  'fs/readDirectory',
  'fs/open',
  'fs/readBlock',
  'fs/close',
  'fs/watchMissing',
  'fs/unwatch',
]);
