/**
 * Who is calling: a tenant token (the whole tenant) or a session token (one session, `full` or
 * `read`). `identify` reads the bearer, `httpScopeError` decides whether a session token may
 * use an HTTP route; the scope's own check is src/sessions/token-scope.ts, the JSON-RPC methods
 * a `read` token may call src/rpc/connection.ts's. Every refusal carries a stable code
 * (src/errors.ts): `EXEC_ERR_UNAUTHORIZED`, `EXEC_ERR_TOKEN_EXPIRED`, `EXEC_ERR_TOKEN_REVOKED`
 * (401); `EXEC_ERR_TOKEN_SCOPE`, `EXEC_ERR_TOKEN_READ_ONLY` (403).
 */
import { execError, type ExecServerError } from '../errors.ts';
import { type Principal, type ScopeLookup, scopeProblem, type TokenScope } from '../sessions/token-scope.ts';
import type { Authenticator } from './auth.ts';
import { MCP_CALL_SUFFIX } from '../protocol/index.ts';
import { isSessionToken, type SessionTokenSigner } from './session-tokens.ts';

export interface Identify extends ScopeLookup {
  readonly auth: Authenticator;
  readonly signer: SessionTokenSigner;
}

/** The bearer of an `Authorization: Bearer X` header. */
export function bearerOf(header: string | undefined): string | undefined {
  const m = /^Bearer\s+(.+)$/i.exec(header ?? '');
  return m?.[1]?.trim();
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
