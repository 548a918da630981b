/**
 * Who is calling a preview port (the proxy of routes.ts authenticates itself: the app's bearer
 * hook lets its requests through). A caller opens the port with a signed token
 * (`?exec_preview_token=`, then a cookie scoped to the port), a session token of that session
 * (bearer, or in place of the signed token) or the tenant's bearer token. What authenticated the
 * caller to us never reaches the application: the token parameter and cookie are removed, and so
 * is `Authorization` when it carries a token of ours, whichever credential opened the port.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Auditor } from '../audit/auditor.ts';
import { execError, httpErrorBody } from '../errors.ts';
import type { TenantId } from '../ids.ts';
import type { SessionManager } from '../sessions/session-manager.ts';
import { scopeProblem } from '../sessions/token-scope.ts';
import type { Authenticator } from '../transport/auth.ts';
import { bearerOf } from '../transport/principal.ts';
import { isSessionToken, type SessionTokenSigner } from '../transport/session-tokens.ts';
import { PreviewSigner } from './signing.ts';

/** The query parameter a signed preview URL carries its token in. */
export const TOKEN_PARAM = 'exec_preview_token';
/** The cookie, scoped to one port, a signed token is traded for. */
export const COOKIE = 'exec_preview';

/** What authenticating a preview's caller uses of the server. */
export interface PreviewAuthContext {
  /** The server's sessions, looked up at each request (a token's revocation goes with its session). */
  readonly app: { readonly sessions: Pick<SessionManager, 'find'> };
  readonly signer: Pick<PreviewSigner, 'verify'>;
  readonly auth: Pick<Authenticator, 'enabled' | 'authenticate'>;
  readonly sessionTokens: Pick<SessionTokenSigner, 'verify'> | undefined;
}

/** Who opened the port, and with what: the proxy strips it and may trade it for a cookie. */
export interface PreviewCaller {
  readonly tenant: TenantId;
  /** The signed token (or session token) came in the query. */
  readonly fromQuery: boolean;
  /** `Authorization` carried the credential. */
  readonly bearer: boolean;
  /** A session token's expiry (a signed token carries its own). */
  readonly expiresAt?: number;
}

function cookieToken(header: string | undefined): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const [name, ...rest] = part.trim().split('=');
    if (name === COOKIE) return rest.join('=');
  }
  return undefined;
}

/** A `Cookie` header without ours (undefined when nothing else is left). */
export function withoutOurCookie(header: string | undefined): string | undefined {
  const kept = (header ?? '')
    .split(';')
    .map((p) => p.trim())
    .filter((p) => p !== '' && p.split('=')[0] !== COOKIE);
  return kept.length > 0 ? kept.join('; ') : undefined;
}

/** A session token's tenant and expiry when it opens `sessionId` now (any access: viewing a preview). */
function sessionTokenOpens(
  ctx: PreviewAuthContext,
  token: string,
  sessionId: string,
  elsewhere: boolean,
): { tenant: TenantId; expiresAt: number } | undefined {
  const scope = ctx.sessionTokens?.verify(token);
  if (scope === undefined || !('tokenId' in scope) || scope.sessionId !== sessionId) return undefined;
  const deps = { findSession: (id: string) => ctx.app.sessions.find(id), servedElsewhere: () => elsewhere };
  if (scopeProblem(scope, deps) !== undefined) return undefined;
  return scope;
}

/**
 * The caller's tenant by signed token (query or cookie) or bearer token; and what to strip.
 * `queryToken`: the value of {@link TOKEN_PARAM} in the request's query (null: none).
 * `elsewhere`: the session may be on another replica, which then checks a session token's
 * revocation itself (fleet-preview.ts); here only its signature and expiry are checked.
 */
export function authenticate(
  ctx: PreviewAuthContext,
  request: Pick<FastifyRequest, 'headers'>,
  queryToken: string | null,
  sessionId: string,
  port: number,
  elsewhere = false,
): PreviewCaller | undefined {
  const token = queryToken ?? cookieToken(request.headers.cookie);
  if (token !== undefined) {
    const scoped = isSessionToken(token) ? sessionTokenOpens(ctx, token, sessionId, elsewhere) : undefined;
    if (scoped !== undefined) return { ...scoped, fromQuery: queryToken !== null, bearer: false };
    const tenant = ctx.signer.verify(sessionId, port, token);
    // A URL made for a session token ends with its revocation (elsewhere: the owner checks).
    const madeFor = PreviewSigner.tokenIdOf(token);
    const revoked = madeFor !== undefined && ctx.app.sessions.find(sessionId)?.tokens.has(madeFor) === true;
    if (tenant !== undefined && !revoked) return { tenant, fromQuery: queryToken !== null, bearer: false };
  }
  const bearer = bearerOf(request.headers.authorization);
  if (bearer !== undefined && isSessionToken(bearer)) {
    const scoped = sessionTokenOpens(ctx, bearer, sessionId, elsewhere);
    return scoped === undefined ? undefined : { ...scoped, fromQuery: false, bearer: true };
  }
  const tenant = ctx.auth.authenticate(request.headers.authorization);
  if (tenant !== undefined) return { tenant, fromQuery: false, bearer: ctx.auth.enabled };
  return undefined;
}

/** Whether `Authorization` carries a token of ours (even beside the signed URL that opened the port). */
export function oursInAuthorization(ctx: Pick<PreviewAuthContext, 'auth'>, header: string | undefined): boolean {
  const bearer = bearerOf(header);
  if (bearer !== undefined && isSessionToken(bearer)) return true;
  return ctx.auth.enabled && ctx.auth.authenticate(header) !== undefined;
}

/** 401 to a caller with no credential that opens the port, recorded as an authentication failure. */
export function refuse(
  audit: Pick<Auditor, 'record'>,
  request: FastifyRequest,
  reply: FastifyReply,
  sessionId: string,
  port: number,
): FastifyReply {
  audit.record({
    action: 'auth.failure',
    session: sessionId,
    actor: { principal: 'anonymous', remote: request.clientAddress || request.ip },
    detail: {
      method: request.method,
      path: `/v1/sessions/${sessionId}/ports/${port}/`,
      code: 'EXEC_ERR_UNAUTHORIZED',
    },
  });
  return reply
    .code(401)
    .header('www-authenticate', 'Bearer')
    .send(
      httpErrorBody(
        execError(
          'EXEC_ERR_UNAUTHORIZED',
          "a preview port needs the tenant's bearer token, a session token or a signed preview URL",
        ),
      ),
    );
}
