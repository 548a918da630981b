/**
 * The authentication hooks of every route but the public ones (health, console files, preview
 * proxies, which authenticate themselves): who calls (tenant token or session token,
 * principal.ts), whether a session token may use this route, and the caller as the audit
 * actor for everything the request does. Refusals are answered before any WebSocket upgrade
 * and recorded in the audit log (`auth.failure`, `auth.denied`), without the token.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { actorStore, type AuditActor, type Auditor } from '../audit/auditor.ts';
import { bearerFromProtocols, bearerOnlyProblem } from '../console/websocket-token.ts';
import { ExecServerError, execError, httpErrorBody } from '../errors.ts';
import type { Principal } from '../sessions/token-scope.ts';
import { httpScopeError, identify, type Identify, requestTarget } from './principal.ts';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | undefined;
  }
}

/** How the auth hook identifies callers, what it skips, and where it records. */
export interface AuthHookOptions extends Identify {
  readonly audit: Auditor;
  /** Routes that need no token, and those that authenticate themselves. */
  readonly skip: (method: string, url: string, path: string) => boolean;
  /** Fleet: whether this request's session is served by another replica (fleet-forward.ts). */
  readonly elsewhere?: ((request: FastifyRequest, sessionId: string) => boolean) | undefined;
}

/**
 * The path of `url` as the router matches it: up to the query or the fragment. The router ends
 * a path at `#` as at `?`, so a check made on any longer spelling would judge another route.
 */
export function routedPath(url: string): string {
  const end = url.search(/[?#]/);
  return end < 0 ? url : url.slice(0, end);
}

/** The audit actor of a request: its principal's name, never its token. */
export function actorOf(request: FastifyRequest): AuditActor {
  return {
    tenant: request.principal?.tenant,
    principal: request.principal?.name ?? 'anonymous',
    remote: request.clientAddress || request.ip,
  };
}

async function refuse(
  request: FastifyRequest,
  reply: FastifyReply,
  e: ExecServerError,
  audit: Auditor,
  path: string,
): Promise<FastifyReply> {
  audit.record({
    action: e.statusCode === 401 ? 'auth.failure' : 'auth.denied',
    tenant: request.principal?.tenant,
    session: request.principal?.scope?.sessionId,
    actor: actorOf(request),
    detail: { method: request.method, path, code: e.code, reason: e.message },
  });
  if (e.statusCode === 401) reply.header('www-authenticate', 'Bearer');
  await reply.code(e.statusCode).send(httpErrorBody(e));
  return reply;
}

/** Authenticates every request before its route (and a WebSocket before its upgrade), and enters the audit actor. */
export function registerAuthHooks(app: FastifyInstance, opts: AuthHookOptions): void {
  app.decorateRequest('principal', undefined);
  app.addHook('onRequest', async (request, reply) => {
    const path = routedPath(request.url);
    if (opts.skip(request.method, request.url, path)) return;
    const upgrade = request.headers.upgrade?.toLowerCase() === 'websocket';
    const protocolProblem = upgrade ? bearerOnlyProblem(request.headers['sec-websocket-protocol']) : undefined;
    if (protocolProblem !== undefined) throw execError('EXEC_ERR_INVALID_REQUEST', protocolProblem);
    const who = identify(
      request.headers.authorization ??
        (upgrade ? bearerFromProtocols(request.headers['sec-websocket-protocol']) : undefined),
      opts.elsewhere === undefined
        ? opts
        : { ...opts, servedElsewhere: (id: string) => opts.elsewhere?.(request, id) === true },
    );
    if (who instanceof ExecServerError) return refuse(request, reply, who, opts.audit, path);
    request.principal = who;
    request.tenant = who.tenant;
    const target = requestTarget(path, request.routeOptions.url, (request.params as { id?: unknown } | null)?.id);
    const denied = who.scope && httpScopeError(who.scope, request.method, target, upgrade);
    if (denied) return refuse(request, reply, denied, opts.audit, path);
  });
  // Callback style on purpose: `done` runs the rest of the request (handler included) inside
  // the store, which an async hook's own continuation would not.
  app.addHook('onRequest', (request, _reply, done) => {
    actorStore.run(actorOf(request), done);
  });
}
