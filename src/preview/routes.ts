/**
 * Preview ports over HTTP. Management (bearer auth like every route):
 * `POST /v1/sessions/:id/ports {port, ttlSeconds?}` exposes a port and answers its paths and a
 * signed path; `GET /v1/sessions/:id/ports` lists them; `DELETE /v1/sessions/:id/ports/:port`
 * closes one. The proxy: `/v1/sessions/:id/ports/:port/...` (any method, and WebSocket
 * upgrades), or the host `p{port}-{session}.{--preview-host}`, rewritten to that path before
 * routing. The proxy authenticates itself (the app's bearer hook lets it through, see
 * `isPreviewProxyRequest`): a signed token (`?exec_preview_token=`, then a cookie scoped to the
 * port), a session token of that session (bearer, or in place of the signed token) or the
 * tenant's bearer token. What authenticated the caller to us never reaches the
 * application: the token parameter and cookie are removed, and so is `Authorization` when it
 * carries a token of ours, whichever credential opened the port.
 */
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { validatorCompiler } from '../transport/validator.ts';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import type { Config } from '../config.ts';
import {
  ErrorSchema,
  PortBodySchema as PortBody,
  PortParamsSchema as PortParams,
  PreviewSchema,
  SessionParamsSchema as SessionParams,
  type ExposedPort,
  type PreviewAnswer,
} from '../protocol/index.ts';
import { ExecServerError, execError, httpErrorBody, toExecError } from '../errors.ts';
import type { TenantId } from '../ids.ts';
import type { Session } from '../sessions/session.ts';
import { createAuthenticator } from '../transport/auth.ts';
import { scopeProblem, type TokenScope } from '../sessions/token-scope.ts';
import { routedPath } from '../transport/auth-hook.ts';
import { bearerOf } from '../transport/principal.ts';
import { isSessionToken, type SessionTokenSigner } from '../transport/session-tokens.ts';
import { CLIENT_HEADER } from '../transport/client-address.ts';
import { FORWARDED_HEADER, LOCAL_ONLY_HEADER } from '../transport/fleet-forward.ts';
import { ownerTarget } from './fleet-preview.ts';
import { proxyHttp, proxyUpgrade, type ProxyTarget } from './proxy.ts';
import { PreviewSigner } from './signing.ts';

export const TOKEN_PARAM = 'exec_preview_token';
export const COOKIE = 'exec_preview';
/** `/v1/sessions/<id>/ports/<port>` and what follows it (any characters: the `s` flag). */
const PROXY_PATH = /^\/v1\/sessions\/([^/?]+)\/ports\/(\d{1,5})(\/.*)?$/s;
/**
 * Added to every proxied answer on the API origin (path-mode URLs): the page runs in a unique
 * opaque origin, so its scripts cannot read the console's storage or call the API as the
 * console; never `allow-same-origin`. The wildcard host gives a preview its own origin instead.
 */
export const PREVIEW_SANDBOX_HEADERS = {
  'content-security-policy': 'sandbox allow-scripts allow-forms allow-popups',
  'x-content-type-options': 'nosniff',
} as const;
/** Marks a request that arrived on the wildcard preview host (its prefix is then `/`). */
const VIA_HOST = Symbol('preview-via-host');

/** Whether the app's bearer hook must let this request through to the proxy's own auth. */
export function isPreviewProxyRequest(method: string, url: string): boolean {
  // The path the router will match: `/v1/sessions/S#/ports/1/x` reaches `/v1/sessions/S`.
  const m = PROXY_PATH.exec(routedPath(url));
  if (!m) return false;
  return m[3] !== undefined || method === 'GET' || method === 'HEAD';
}

/** `rewriteUrl` for Fastify: `p{port}-{session}.{previewHost}` becomes the proxy path. */
export function previewRewriter(previewHost: string | undefined): ((req: IncomingMessage) => string) | undefined {
  if (previewHost === undefined) return undefined;
  const suffix = `.${previewHost.toLowerCase()}`;
  return (req) => {
    const url = req.url ?? '/';
    const host = (req.headers.host ?? '').toLowerCase().replace(/:\d+$/, '');
    if (!host.endsWith(suffix)) return url;
    const m = /^p(\d{1,5})-([a-z0-9-]{1,64})$/.exec(host.slice(0, -suffix.length));
    if (!m) return url;
    (req as IncomingMessage & { [VIA_HOST]?: boolean })[VIA_HOST] = true;
    return `/v1/sessions/${m[2]}/ports/${m[1]}${url.startsWith('/') ? url : `/${url}`}`;
  };
}

/**
 * What exposing a port answers (HTTP and JSON-RPC alike). `scope`: the caller's session token,
 * whose signed URL must not outlive it (nor its revocation: the URL names it).
 */
export function previewAnswer(
  session: Session,
  exposed: ExposedPort,
  signer: PreviewSigner,
  config: Pick<Config, 'previewHost' | 'previewUrlTtlSeconds'>,
  ttlSeconds?: number,
  scope?: Pick<TokenScope, 'tokenId' | 'expiresAt'>,
): PreviewAnswer {
  const wanted = Math.floor(Date.now() / 1000) + (ttlSeconds ?? config.previewUrlTtlSeconds);
  const expiresAt = scope === undefined ? wanted : Math.min(wanted, scope.expiresAt);
  const path = `/v1/sessions/${session.id}/ports/${exposed.port}/`;
  const token = signer.sign(session.tenant, session.id, exposed.port, expiresAt, scope?.tokenId);
  return {
    port: exposed.port,
    exposedAt: exposed.exposedAt,
    path,
    ...(config.previewHost !== undefined ? { host: `p${exposed.port}-${session.id}.${config.previewHost}` } : {}),
    signedPath: `${path}?${TOKEN_PARAM}=${encodeURIComponent(token)}`,
    expiresAt: new Date(expiresAt * 1000).toISOString(),
  };
}

function cookieToken(header: string | undefined): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const [name, ...rest] = part.trim().split('=');
    if (name === COOKIE) return rest.join('=');
  }
  return undefined;
}

function withoutOurCookie(header: string | undefined): string | undefined {
  const kept = (header ?? '')
    .split(';')
    .map((p) => p.trim())
    .filter((p) => p !== '' && p.split('=')[0] !== COOKIE);
  return kept.length > 0 ? kept.join('; ') : undefined;
}

/** The proxy: bodies are streamed to the application, never parsed here. */
async function registerProxy(scope: FastifyInstance, ctx: PreviewContext): Promise<void> {
  await scope.register(async (proxy) => {
    proxy.removeAllContentTypeParsers();
    proxy.addContentTypeParser('*', (_request, _payload, done) => done(null));
    proxy.route({
      method: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'],
      url: '/v1/sessions/:id/ports/:port/*',
      schema: { hide: true },
      preHandler: (request, reply) => handleProxy(ctx, request, reply),
      handler: async () => undefined,
    });
  });
}

/** What the preview proxy authenticates with. */
interface PreviewContext {
  readonly app: FastifyInstance;
  readonly signer: PreviewSigner;
  readonly auth: ReturnType<typeof createAuthenticator>;
  readonly sessionTokens: SessionTokenSigner | undefined;
}

export async function registerPreviewRoutes(
  app: FastifyInstance,
  opts: { config: Config; signer: PreviewSigner; sessionTokens?: SessionTokenSigner },
): Promise<void> {
  const { config, signer } = opts;
  const ctx: PreviewContext = { app, signer, auth: createAuthenticator(config), sessionTokens: opts.sessionTokens };

  await app.register(async (scope) => {
    scope.setValidatorCompiler(validatorCompiler);
    const api = scope.withTypeProvider<TypeBoxTypeProvider>();
    const errors = { '4xx': ErrorSchema, '5xx': ErrorSchema };

    api.post(
      '/v1/sessions/:id/ports',
      {
        schema: {
          operationId: 'exposePort',
          tags: ['preview'],
          summary: 'Expose a TCP port of the session as a preview URL',
          params: SessionParams,
          body: PortBody,
          response: { 201: PreviewSchema, ...errors },
        },
      },
      async (request, reply) => {
        const session = app.sessions.get(request.params.id, request.tenant);
        const exposed = await session.ports.expose(request.body.port);
        const scope = request.principal?.scope;
        return reply.code(201).send(previewAnswer(session, exposed, signer, config, request.body.ttlSeconds, scope));
      },
    );
    api.get(
      '/v1/sessions/:id/ports',
      {
        schema: {
          operationId: 'listPorts',
          tags: ['preview'],
          summary: 'Exposed ports of the session',
          params: SessionParams,
          response: { 200: Type.Object({ ports: Type.Array(PreviewSchema) }), ...errors },
        },
      },
      async (request) => {
        const session = app.sessions.get(request.params.id, request.tenant);
        const scope = request.principal?.scope;
        return { ports: session.ports.list().map((p) => previewAnswer(session, p, signer, config, undefined, scope)) };
      },
    );
    api.delete(
      '/v1/sessions/:id/ports/:port',
      {
        schema: {
          operationId: 'closePort',
          tags: ['preview'],
          summary: 'Stop exposing a port; its connections end',
          params: PortParams,
          response: { 204: Type.Null(), ...errors },
        },
      },
      async (request, reply) => {
        const session = app.sessions.get(request.params.id, request.tenant);
        if (!(await session.ports.close(request.params.port)))
          throw execError('EXEC_ERR_NOT_FOUND', `port ${request.params.port} is not exposed`);
        return reply.code(204).send(null);
      },
    );
    // The bare port path: relative links need the trailing slash.
    scope.get('/v1/sessions/:id/ports/:port', { schema: { hide: true } }, async (request, reply) => {
      const [path, query] = splitUrl(request.url);
      return reply.redirect(`${path}/${query}`, 308);
    });

    await registerProxy(scope, ctx);
  });
}

function splitUrl(url: string): [string, string] {
  const i = url.indexOf('?');
  return i < 0 ? [url, ''] : [url.slice(0, i), url.slice(i)];
}

/** A session token's tenant and expiry when it opens `sessionId` now (any access: viewing a preview). */
function sessionTokenOpens(
  ctx: PreviewContext,
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
 * `elsewhere`: the session may be on another replica, which then checks a session token's
 * revocation itself (fleet-preview.ts); here only its signature and expiry are checked.
 */
function authenticate(
  ctx: PreviewContext,
  request: FastifyRequest,
  sessionId: string,
  port: number,
  elsewhere = false,
): { tenant: TenantId; fromQuery: boolean; bearer: boolean; expiresAt?: number } | undefined {
  const query = new URLSearchParams(splitUrl(request.url)[1]);
  const fromQuery = query.get(TOKEN_PARAM);
  const token = fromQuery ?? cookieToken(request.headers.cookie);
  if (token !== undefined) {
    const scoped = isSessionToken(token) ? sessionTokenOpens(ctx, token, sessionId, elsewhere) : undefined;
    if (scoped !== undefined) return { ...scoped, fromQuery: fromQuery !== null, bearer: false };
    const tenant = ctx.signer.verify(sessionId, port, token);
    // A URL made for a session token ends with its revocation (elsewhere: the owner checks).
    const madeFor = PreviewSigner.tokenIdOf(token);
    const revoked = madeFor !== undefined && ctx.app.sessions.find(sessionId)?.tokens.has(madeFor) === true;
    if (tenant !== undefined && !revoked) return { tenant, fromQuery: fromQuery !== null, bearer: false };
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
function oursInAuthorization(ctx: PreviewContext, header: string | undefined): boolean {
  const bearer = bearerOf(header);
  if (bearer !== undefined && isSessionToken(bearer)) return true;
  return ctx.auth.enabled && ctx.auth.authenticate(header) !== undefined;
}

/** 401 to a caller with no credential that opens the port, recorded as an authentication failure. */
function refuse(
  app: FastifyInstance,
  request: FastifyRequest,
  reply: FastifyReply,
  sessionId: string,
  port: number,
): FastifyReply {
  app.audit.record({
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

async function handleProxy(ctx: PreviewContext, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const { app } = ctx;
  const m = PROXY_PATH.exec(splitUrl(request.url)[0]);
  const sessionId = m?.[1] ?? '';
  const port = Number(m?.[2]);
  if (!m || !(port >= 1 && port <= 65535))
    return reply.code(404).send(httpErrorBody(execError('EXEC_ERR_NOT_FOUND', 'no such preview port')));
  const elsewhere = app.sessions.find(sessionId) === undefined && app.sessions.backend.fleet !== undefined;
  let who = authenticate(ctx, request, sessionId, port, elsewhere);
  if (!who) return refuse(app, request, reply, sessionId, port);
  if (elsewhere) {
    const owner = await ownerTarget(app.sessions, request, sessionId, who.tenant).catch(toExecError);
    if (owner instanceof ExecServerError) return reply.code(owner.statusCode).send(httpErrorBody(owner));
    if (owner !== undefined) return proxyTo(request, reply, owner);
    // Served here after all (taken over just now, or nowhere): a session token is checked fully.
    who = authenticate(ctx, request, sessionId, port);
    if (!who) return refuse(app, request, reply, sessionId, port);
  }
  let session: Session;
  try {
    session = app.sessions.get(sessionId, who.tenant);
    if (!session.ports.has(port))
      throw execError('EXEC_ERR_NOT_FOUND', `port ${port} of session ${sessionId} is not exposed`);
  } catch (err) {
    const e = toExecError(err);
    return reply.code(e.statusCode).send(httpErrorBody(e));
  }
  const viaHost = (request.raw as IncomingMessage & { [VIA_HOST]?: boolean })[VIA_HOST] === true;
  const prefix = viaHost ? '/' : `/v1/sessions/${sessionId}/ports/${port}/`;
  const [path, rawQuery] = splitUrl(request.url);
  const query = new URLSearchParams(rawQuery);
  const token = query.get(TOKEN_PARAM);
  query.delete(TOKEN_PARAM);
  // Rebuilt only when our parameter was in it: the application gets its query as it was sent.
  const cleanQuery = token === null ? rawQuery : query.size > 0 ? `?${query.toString()}` : '';
  if (
    who.fromQuery &&
    token !== null &&
    (request.method === 'GET' || request.method === 'HEAD') &&
    request.headers.upgrade === undefined
  ) {
    // Trade the token for a cookie scoped to this port, then load the page without it.
    const expiresAt = who.expiresAt ?? Number(token.split('.')[0]);
    const maxAge = Math.max(0, expiresAt - Math.floor(Date.now() / 1000));
    return reply
      .header('set-cookie', `${COOKIE}=${token}; Path=${prefix}; Max-Age=${maxAge}; HttpOnly; SameSite=Lax`)
      .redirect(`${splitUrl(request.originalUrl)[0]}${cleanQuery}`, 302);
  }
  const headers: IncomingHttpHeaders = { ...request.headers };
  const cookie = withoutOurCookie(headers.cookie);
  if (cookie === undefined) delete headers.cookie;
  else headers.cookie = cookie;
  if (who.bearer || oursInAuthorization(ctx, request.headers.authorization)) delete headers.authorization;
  headers['x-forwarded-prefix'] = prefix.replace(/\/$/, '') || '/';
  // What the fleet's replicas tell each other stays between them: the application in the
  // session must not get a client stamp it could replay (client-address.ts).
  delete headers[CLIENT_HEADER];
  delete headers[FORWARDED_HEADER];
  delete headers[LOCAL_ONLY_HEADER];
  const target: ProxyTarget = {
    open: () => session.ports.open(port),
    path: `/${path.slice(`/v1/sessions/${m[1]}/ports/${port}/`.length)}${cleanQuery}`,
    headers,
    responseHeaders: viaHost ? undefined : PREVIEW_SANDBOX_HEADERS,
  };
  return proxyTo(request, reply, target);
}

/** Hands the request (or its WebSocket upgrade) to `target` (proxy.ts). */
function proxyTo(request: FastifyRequest, reply: FastifyReply, target: ProxyTarget): FastifyReply {
  reply.hijack();
  // An upgrade only when the server took it as one: else its body was read, as for any request.
  if (request.ws) {
    proxyUpgrade(request.raw, request.raw.socket as Duplex, upgradeHeadOf(request.raw), target);
  } else {
    proxyHttp(request.raw, reply.raw, target);
  }
  return reply;
}

/** Bytes a client sent after its upgrade request (kept by @fastify/websocket on the request). */
function upgradeHeadOf(req: IncomingMessage): Buffer {
  const key = Object.getOwnPropertySymbols(req).find((s) => s.description === 'ws-head');
  const head = key === undefined ? undefined : (req as unknown as Record<symbol, unknown>)[key];
  return Buffer.isBuffer(head) ? head : Buffer.alloc(0);
}
