/**
 * Preview ports over HTTP. Management (bearer auth like every route):
 * `POST /v1/sessions/:id/ports {port, ttlSeconds?}` exposes a port and answers its paths and a
 * signed path; `GET /v1/sessions/:id/ports` lists them; `DELETE /v1/sessions/:id/ports/:port`
 * closes one. The proxy: `/v1/sessions/:id/ports/:port/...` (any method, and WebSocket
 * upgrades), or the host `p{port}-{session}.{--preview-host}`, rewritten to that path before
 * routing. The proxy authenticates itself (the app's bearer hook lets it through, see
 * `isPreviewProxyRequest`; the credentials it takes, and strips: preview-auth.ts).
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
import type { Session } from '../sessions/session.ts';
import { createAuthenticator } from '../transport/auth.ts';
import type { TokenScope } from '../sessions/token-scope.ts';
import { routedPath } from '../transport/auth-hook.ts';
import type { SessionTokenSigner } from '../transport/session-tokens.ts';
import { CLIENT_HEADER } from '../transport/client-address.ts';
import { FORWARDED_HEADER, LOCAL_ONLY_HEADER } from '../transport/fleet-forward.ts';
import { ownerTarget } from './fleet-preview.ts';
import {
  authenticate,
  COOKIE,
  oursInAuthorization,
  type PreviewAuthContext,
  refuse,
  TOKEN_PARAM,
  withoutOurCookie,
} from './preview-auth.ts';
import { proxyHttp, proxyUpgrade, type ProxyTarget } from './proxy.ts';
import type { PreviewSigner } from './signing.ts';

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

/** What the preview proxy authenticates with (preview-auth.ts), and the server it serves from. */
interface PreviewContext extends PreviewAuthContext {
  readonly app: FastifyInstance;
}

/** Registers the preview routes: exposing and listing ports, and the proxy into them. */
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

async function handleProxy(ctx: PreviewContext, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const { app } = ctx;
  const [path, rawQuery] = splitUrl(request.url);
  const m = PROXY_PATH.exec(path);
  const sessionId = m?.[1] ?? '';
  const port = Number(m?.[2]);
  if (!m || !(port >= 1 && port <= 65535))
    return reply.code(404).send(httpErrorBody(execError('EXEC_ERR_NOT_FOUND', 'no such preview port')));
  const query = new URLSearchParams(rawQuery);
  const token = query.get(TOKEN_PARAM);
  const elsewhere = app.sessions.find(sessionId) === undefined && app.sessions.backend.fleet !== undefined;
  let who = authenticate(ctx, request, token, sessionId, port, elsewhere);
  if (!who) return refuse(app.audit, request, reply, sessionId, port);
  if (elsewhere) {
    const owner = await ownerTarget(app.sessions, request, sessionId, who.tenant).catch(toExecError);
    if (owner instanceof ExecServerError) return reply.code(owner.statusCode).send(httpErrorBody(owner));
    if (owner !== undefined) return proxyTo(request, reply, owner);
    // Served here after all (taken over just now, or nowhere): a session token is checked fully.
    who = authenticate(ctx, request, token, sessionId, port);
    if (!who) return refuse(app.audit, request, reply, sessionId, port);
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
