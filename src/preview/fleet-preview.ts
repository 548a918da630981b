/**
 * Preview ports in a fleet (docs/architecture.md, "Fleet"). A browser reaches whichever replica
 * the load balancer picks, and the port lives with the session on its owner. The proxy
 * authenticates the caller here (the preview secret and the session-token key are the same on
 * every replica), then proxies a request for a session another live replica owns to that
 * replica as it came: the path before the wildcard host's rewrite, its Host, token and cookie,
 * so the owner's own proxy authenticates it again, fully, and reaches the port. A forwarded
 * request is never forwarded again. WebSocket upgrades go the same way (proxy.ts pipes them).
 */
import { isIP, connect as netConnect } from 'node:net';
import type { Duplex } from 'node:stream';
import { connect as tlsConnect } from 'node:tls';
import type { FastifyRequest } from 'fastify';
import { execError, type ExecServerError } from '../errors.ts';
import type { TenantId } from '../ids.ts';
import type { SessionManager } from '../sessions/session-manager.ts';
import { CLIENT_HEADER, clientStampFor } from '../transport/client-address.ts';
import { FORWARDED_HEADER } from '../transport/fleet-forward.ts';
import { watchOwner } from '../transport/owner-watch.ts';
import type { ProxyTarget } from './proxy.ts';

/** How long a connection to another replica may take to open. */
const CONNECT_MS = 10_000;

/** A new connection to the replica at `base` (its advertised URL), TLS for `https:`. */
function replicaSocket(base: string): Promise<Duplex> {
  const url = new URL(base);
  const https = url.protocol === 'https:';
  const port = Number(url.port) || (https ? 443 : 80);
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  return new Promise((resolve, reject) => {
    const socket = https
      ? tlsConnect({ host, port, ...(isIP(host) === 0 ? { servername: host } : {}) })
      : netConnect(port, host);
    const timer = setTimeout(
      () =>
        socket.destroy(
          execError('EXEC_ERR_BACKEND_UNAVAILABLE', `replica at ${base} did not answer within ${CONNECT_MS} ms`),
        ),
      CONNECT_MS,
    );
    socket.once(https ? 'secureConnect' : 'connect', () => {
      clearTimeout(timer);
      socket.off('error', reject);
      resolve(socket);
    });
    socket.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

/**
 * Where a preview request for `sessionId` (its caller of `tenant`) goes: undefined when it is
 * served here (the session is here, was taken over just now, or is nowhere: the proxy answers),
 * the owner as a proxy target, or the error to answer.
 */
export async function ownerTarget(
  sessions: SessionManager,
  request: FastifyRequest,
  sessionId: string,
  tenant: TenantId,
): Promise<ProxyTarget | ExecServerError | undefined> {
  const fleet = sessions.backend.fleet;
  if (fleet === undefined || sessions.find(sessionId) !== undefined) return undefined;
  const route = await sessions.route(sessionId, tenant);
  if (route.kind !== 'remote') return undefined;
  if (request.headers[FORWARDED_HEADER] !== undefined)
    return execError('EXEC_ERR_BACKEND_UNAVAILABLE', `session ${sessionId} is moving between replicas: try again`);
  return {
    open: () => replicaSocket(route.url),
    watch: (silent) => watchOwner(route.url, silent),
    path: request.originalUrl,
    headers: {
      ...request.headers,
      [FORWARDED_HEADER]: fleet.replicaId,
      [CLIENT_HEADER]: clientStampFor(request),
    },
  };
}
