/**
 * HTTP in a fleet (docs/architecture.md, "Fleet"): a request for a session another live replica
 * owns is forwarded to that replica as it came (method, path, headers with the caller's token,
 * body streamed, answer streamed back); a session whose owner's lease is gone is taken over
 * first and served here. The fleet-wide `GET /v1/sessions` is fleet-list.ts.
 */
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { bearerFromProtocols } from '../console/websocket-token.ts';
import { scopeProblem } from '../sessions/token-scope.ts';
import { execError, httpErrorBody } from '../errors.ts';
import { asTenantId } from '../ids.ts';
import type { FleetBackend } from '../backends/types.ts';
import { MCP_PATH, MCP_REPLICA_SEPARATOR, MCP_SESSION_HEADER } from '../protocol/index.ts';
import type { SessionRoute } from '../sessions/session-manager.ts';
import { actorOf } from './auth-hook.ts';
import { CLIENT_HEADER, clientStampFor } from './client-address.ts';
import { OWNER_SILENCE_MS, watchOwner } from './owner-watch.ts';
import { bearerOf } from './principal.ts';
import { isSessionToken, type SessionTokenSigner } from './session-tokens.ts';

/** Set on a forwarded request: the replica that forwarded it (a request is forwarded once). */
export const FORWARDED_HEADER = 'x-exec-server-forwarded-by';
/** Asks a replica for its own sessions only (the fleet listing gathers them). */
export const LOCAL_ONLY_HEADER = 'x-exec-server-fleet-local';

/** Kept-alive connections to the other replicas: a forwarded call costs no new handshake. */
const agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };

const SESSION_PATH = /^\/v1\/sessions\/([^/?#]+)/;

/**
 * Headers that belong to one hop, not to the request. `Host` is kept: the owner's Origin check
 * and preview host compare against the host the caller used, as this replica would.
 */
const HOP_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'proxy-connection']);

/**
 * The headers of a forwarded request. A bodiless one is sent without its body, so without the
 * `content-length` it came with: the owner would take that many bytes of the next request on the
 * kept-alive connection (another caller's) for its body.
 */
function forwardHeaders(
  request: FastifyRequest,
  replicaId: string,
  bodiless: boolean,
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(request.headers))
    if (v !== undefined && !HOP_HEADERS.has(k.toLowerCase()) && !(bodiless && k === 'content-length')) out[k] = v;
  out[FORWARDED_HEADER] = replicaId;
  out[CLIENT_HEADER] = clientStampFor(request);
  return out;
}

/**
 * How a forward ended: 'done' (answered, or an error told to the caller), 'unreachable' (no
 * byte of the request was sent: the caller may route it again), or 'lost' (a bodiless request
 * was sent and the owner failed before it answered: it may have acted on it).
 */
type Forwarded = 'done' | 'unreachable' | 'lost';

/**
 * Sends `request` to the replica at `base` and streams its answer back (see Forwarded). A
 * request with a body that the owner failed under: 503, since its body is spent and it may
 * have run. An owner that answers neither the request nor its `/healthz` for
 * OWNER_SILENCE_MS: 503, 'done'. With `missingIsDone` (a DELETE sent again after a failed owner
 * may have carried it out), a 404 answer is a 204.
 */
function forward(
  request: FastifyRequest,
  reply: FastifyReply,
  base: string,
  replicaId: string,
  missingIsDone: boolean,
): Promise<Forwarded> {
  return new Promise((resolve) => {
    const target = new URL(request.url, base);
    const https = target.protocol === 'https:';
    const bodiless = request.method === 'GET' || request.method === 'HEAD' || request.method === 'DELETE';
    const upstream = (https ? httpsRequest : httpRequest)(target, {
      method: request.method,
      headers: forwardHeaders(request, replicaId, bodiless),
      agent: https ? agents.https : agents.http,
    });
    let sent = false;
    let written = false;
    let silenced = false;
    const unwatch = watchOwner(base, () => {
      silenced = true;
      const silence = `no answer for ${OWNER_SILENCE_MS / 1000} s, nor from its /healthz`;
      upstream.destroy(execError('EXEC_ERR_BACKEND_UNAVAILABLE', silence));
    });
    upstream.on('close', unwatch);
    const start = (): void => {
      written = true;
      sent = !bodiless;
      if (bodiless) upstream.end();
      else request.raw.pipe(upstream);
    };
    upstream.on('socket', (socket) => {
      if (socket.connecting) socket.once('connect', start);
      else start();
    });
    upstream.on('response', (res: IncomingMessage) => {
      unwatch();
      if (missingIsDone && res.statusCode === 404) {
        res.resume();
        void reply.code(204).send(null);
        return resolve('done');
      }
      void reply.hijack();
      const headers = { ...res.headers };
      for (const h of HOP_HEADERS) delete headers[h];
      reply.raw.writeHead(res.statusCode ?? 502, headers);
      res.pipe(reply.raw);
      res.on('error', () => reply.raw.destroy());
      reply.raw.on('close', () => res.destroy());
      res.on('end', () => resolve('done'));
      res.on('close', () => resolve('done'));
    });
    upstream.on('error', (err) => {
      if (reply.sent || reply.raw.headersSent) {
        reply.raw.destroy();
        resolve('done');
      } else if (!sent && !silenced) resolve(written ? 'lost' : 'unreachable');
      else {
        const e = execError('EXEC_ERR_BACKEND_UNAVAILABLE', `the replica serving this session failed: ${err.message}`);
        void reply.code(e.statusCode).send(httpErrorBody(e));
        resolve('done');
      }
    });
  });
}

/**
 * Session tokens in a fleet: a token's revocations live with its session, on the owner. A
 * request with a well-signed session token whose session another live replica owns is let
 * through authentication here (`elsewhere`) and forwarded; the owner checks the token fully.
 * When it is served here instead (the session was taken over meanwhile), it is checked here in
 * full before its handler. Registered before the authentication hook; undefined without a fleet.
 */
export function registerFleetTokenRouting(
  app: FastifyInstance,
  signer: SessionTokenSigner,
): ((request: FastifyRequest, sessionId: string) => boolean) | undefined {
  if (app.sessions.backend.fleet === undefined) return undefined;
  const remote = new WeakMap<FastifyRequest, string>();
  app.addHook('onRequest', async (request) => {
    const upgrade = request.headers.upgrade?.toLowerCase() === 'websocket';
    const bearer = bearerOf(
      request.headers.authorization ??
        (upgrade ? bearerFromProtocols(request.headers['sec-websocket-protocol']) : undefined),
    );
    if (bearer === undefined || !isSessionToken(bearer)) return;
    const scope = signer.verify(bearer);
    if (!('tokenId' in scope) || app.sessions.find(scope.sessionId) !== undefined) return;
    // An orphan is taken over here (then checked here); a live owner's session goes there.
    const route = await app.sessions.route(scope.sessionId, asTenantId(scope.tenant)).catch(() => undefined);
    if (route?.kind === 'remote') remote.set(request, scope.sessionId);
  });
  // Such a request may be served here after all: its owner did not answer and this replica took
  // the session over (registerFleetForwarding), or another request did meanwhile. The session's
  // revocations are here now: the token is checked against them before any handler runs.
  app.addHook('preHandler', async (request, reply) => {
    const sessionId = remote.get(request);
    const scope = request.principal?.scope;
    if (sessionId === undefined || scope === undefined || app.sessions.find(sessionId) === undefined) return;
    const problem = scopeProblem(scope, { findSession: (id) => app.sessions.find(id) });
    if (problem === undefined) return;
    app.audit.record({
      action: problem.statusCode === 401 ? 'auth.failure' : 'auth.denied',
      tenant: scope.tenant,
      session: scope.sessionId,
      actor: actorOf(request),
      detail: {
        method: request.method,
        path: request.url.split('?')[0] ?? '',
        code: problem.code,
        reason: problem.message,
      },
    });
    if (problem.statusCode === 401) reply.header('www-authenticate', 'Bearer');
    return reply.code(problem.statusCode).send(httpErrorBody(problem));
  });
  return (request, sessionId) => remote.get(request) === sessionId;
}

/**
 * Where a request for another replica goes, if it does: a session route to the session's owner;
 * MCP (`/mcp`) to the replica that holds the MCP connection (named in its id), or at initialize
 * to the owner of the session it binds (`x-exec-session`).
 */
async function targetOf(request: FastifyRequest, fleet: FleetBackend): Promise<Target | undefined> {
  const sessions = request.server.sessions;
  const path = request.url.split('?')[0] ?? '';
  const sessionRoute = (id: string, deletes: Target['deletes'] = 'nothing'): Target => ({
    route: () => sessions.route(id, request.tenant),
    reroute: (url) => sessions.rerouteAfterFailure(id, request.tenant, url),
    deletes,
  });
  const m = SESSION_PATH.exec(path);
  if (m?.[1] !== undefined) {
    const deletes = request.method !== 'DELETE' ? 'nothing' : path === m[0] ? 'session' : 'part';
    return sessionRoute(decodeURIComponent(m[1]), deletes);
  }
  if (path !== MCP_PATH) return undefined;
  const mcpId = request.headers['mcp-session-id'];
  if (typeof mcpId === 'string') {
    const replicaId = mcpId.split(MCP_REPLICA_SEPARATOR)[0] ?? '';
    if (!mcpId.includes(MCP_REPLICA_SEPARATOR) || replicaId === fleet.replicaId) return undefined;
    const route = async (): Promise<SessionRoute> => {
      const url = await fleet.replicaUrl(replicaId);
      return url === undefined ? { kind: 'absent' } : { kind: 'remote', url, replicaId };
    };
    return { route, reroute: () => Promise.resolve({ kind: 'absent' }), deletes: 'nothing' };
  }
  const bound = request.headers[MCP_SESSION_HEADER];
  return typeof bound === 'string' ? sessionRoute(bound) : undefined;
}

interface Target {
  route(): Promise<SessionRoute>;
  reroute(url: string): Promise<SessionRoute>;
  /** What a DELETE removes: `DELETE /v1/sessions/:id` the session, a longer path a part of it (a port, a token, a snapshot). */
  readonly deletes: 'session' | 'part' | 'nothing';
}

/** The session routes (and MCP) of a fleet go to the replica that serves them (this hook runs after authentication). */
export function registerFleetForwarding(app: FastifyInstance): void {
  const fleet = app.sessions.backend.fleet;
  if (fleet === undefined) return;
  // DELETEs of a part of a session served here after the owner failed under them: see below.
  const resent = new WeakSet<FastifyRequest>();
  app.addHook('onSend', async (request, reply, payload) => {
    if (!resent.has(request) || reply.statusCode !== 404) return payload;
    reply.code(204).removeHeader('content-type');
    return null;
  });
  app.addHook('onRequest', async (request, reply) => {
    if (request.principal === undefined || request.headers.upgrade !== undefined) return;
    const target = await targetOf(request, fleet);
    if (target === undefined) return;
    let route = await target.route();
    let again = false;
    for (let hop = 0; route.kind === 'remote' && hop < 3; hop++) {
      if (request.headers[FORWARDED_HEADER] !== undefined) {
        const e = execError(
          'EXEC_ERR_BACKEND_UNAVAILABLE',
          `${request.url.split('?')[0]} is moving between replicas (now at ${route.replicaId}): try again`,
        );
        return reply.code(e.statusCode).send(httpErrorBody(e));
      }
      const outcome = await forward(request, reply, route.url, fleet.replicaId, again);
      if (outcome === 'done') return reply;
      route = await target.reroute(route.url);
      // 'lost': the owner had this bodiless request and failed before it answered. A GET or
      // HEAD is sent again (a read), and so is a DELETE while its session is still somewhere
      // (taken over: the new owner acts on it). A session's DELETE whose session is gone now
      // was carried out by the failed owner (a session that existed is absent only once
      // removed): what was asked, so 204. Sent again it would answer 404 to a client whose
      // delete succeeded; a 503 would only send the client's retry into that same 404.
      if (outcome === 'lost' && target.deletes === 'session' && route.kind === 'absent')
        return reply.code(204).send(null);
      // A DELETE of a part of the session (a port, a token, a snapshot) is sent again, here or
      // to the new owner; if the failed owner had carried it out, the part is gone: 204, as
      // above, not 404. The part that never existed is told apart only by the lost answer.
      if (outcome === 'lost' && target.deletes === 'part') again = true;
    }
    if (route.kind === 'remote') {
      const e = execError('EXEC_ERR_BACKEND_UNAVAILABLE', `the replica ${route.replicaId} does not answer`);
      return reply.code(e.statusCode).send(httpErrorBody(e));
    }
    if (again) resent.add(request);
    return undefined;
  });
}
