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

/** What it takes to tell who a bearer token names: the tenant tokens and the session tokens' key. */
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

/** A path decoded, or undefined when its escapes are malformed (never a match then). */
function safeDecode(path: string): string | undefined {
  try {
    return decodeURIComponent(path);
  } catch {
    return undefined;
  }
}

/**
 * What a request targets, as the router understood it: a route under `/v1/sessions/:id` gives
 * the session and the rest of the route's pattern (`/tokens/:tokenId`). Checking the pattern,
 * not the raw URL, means an escaped spelling (`/%74okens`) is judged as the route it reaches.
 */
export interface RequestTarget {
  /** The session the route acts on; undefined for routes outside one session. */
  readonly sessionId: string | undefined;
  /** The route's pattern after `/v1/sessions/:id` ('' for the session itself). */
  readonly suffix: string;
  /** For messages. */
  readonly path: string;
}

const SESSION_ROUTE = /^\/v1\/sessions\/:id(\/.*)?$/;
const SESSION_PATH = /^\/v1\/sessions\/([^/?#]+)(\/[^?#]*)?$/;

/**
 * The target of a request: from the matched route (`pattern`, `params.id`) when there is one,
 * else from the decoded path (a URL no route serves answers 404 anyway; the scope check only
 * must not let it through differently).
 */
export function requestTarget(path: string, pattern: string | undefined, id: unknown): RequestTarget {
  if (pattern !== undefined) {
    const m = SESSION_ROUTE.exec(pattern);
    return m && typeof id === 'string'
      ? { sessionId: id, suffix: m[1] ?? '', path }
      : { sessionId: undefined, suffix: pattern, path };
  }
  const m = SESSION_PATH.exec(safeDecode(path) ?? '');
  return { sessionId: m?.[1], suffix: m?.[2] ?? '', path };
}

/**
 * Whether a session token may call `method` on `target`: its own session's routes only (not
 * token minting), the WebSocket endpoint (initialize checks the session), and for `read` only GET.
 */
export function httpScopeError(
  scope: TokenScope,
  method: string,
  target: RequestTarget,
  upgrade: boolean,
): ExecServerError | undefined {
  const { path, suffix } = target;
  if (upgrade && (path === '/' || path === '/v1/ws')) return undefined;
  if (target.sessionId === undefined)
    return execError(
      'EXEC_ERR_TOKEN_SCOPE',
      `a session token opens only its session (${scope.sessionId}); ${method} ${path} needs a tenant token`,
    );
  if (target.sessionId !== scope.sessionId)
    return execError('EXEC_ERR_TOKEN_SCOPE', `this token is scoped to session ${scope.sessionId}`);
  if (suffix.startsWith('/tokens'))
    return execError('EXEC_ERR_TOKEN_SCOPE', 'session tokens cannot create or revoke tokens; use a tenant token');
  // A fork makes new sessions, which a session token cannot open either.
  if (suffix === '/fork')
    return execError(
      'EXEC_ERR_TOKEN_SCOPE',
      'session tokens cannot fork (a fork creates sessions); use a tenant token',
    );
  // MCP is for tenant tokens (`/mcp` refuses session tokens), so is the route replicas use to
  // run an MCP connection's tool call on a session's owner (src/mcp/forwarded-calls.ts).
  if (suffix === MCP_CALL_SUFFIX)
    return execError('EXEC_ERR_TOKEN_SCOPE', 'session tokens cannot call MCP tools; use a tenant token');
  if (scope.access === 'read' && method !== 'GET' && method !== 'HEAD')
    return execError('EXEC_ERR_TOKEN_READ_ONLY', `a read token cannot ${method} ${path}`);
  return undefined;
}
