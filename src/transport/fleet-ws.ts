/**
 * WebSocket sessions in a fleet (docs/architecture.md, "Fleet"): a connection whose first
 * message is `initialize` with the `resumeSessionId` of a session another live replica owns is
 * relayed, frame for frame, to a WebSocket of the caller's on that replica; one whose owner's
 * lease is gone is taken over here first. Everything else is served here as usual.
 */
import type { FastifyRequest } from 'fastify';
import { WebSocket } from 'ws';
import type { Logger } from '../logger.ts';
import type { SessionManager, SessionRoute } from '../sessions/session-manager.ts';
import { CLIENT_HEADER, clientStampFor } from './client-address.ts';
import { FORWARDED_HEADER } from './fleet-forward.ts';

/** Close code for a relayed connection whose replica went away: resume the session (any replica). */
const OWNER_GONE = 1012;

function resumeTarget(text: string): string | undefined {
  if (!text.includes('resumeSessionId')) return undefined;
  try {
    const msg = JSON.parse(text) as { method?: unknown; params?: { resumeSessionId?: unknown } };
    const id = msg.params?.resumeSessionId;
    return msg.method === 'initialize' && typeof id === 'string' ? id : undefined;
  } catch {
    return undefined;
  }
}

/** The caller's headers the owner needs: its token, and the host it used (the owner's Origin check). */
function relayHeaders(request: FastifyRequest, replicaId: string): Record<string, string> {
  const headers: Record<string, string> = {
    [FORWARDED_HEADER]: replicaId,
    [CLIENT_HEADER]: clientStampFor(request),
  };
  for (const h of ['authorization', 'host', 'x-forwarded-proto', 'x-forwarded-host'] as const) {
    const v = request.headers[h];
    if (typeof v === 'string') headers[h] = v;
  }
  return headers;
}

/**
 * The message handler of one connection: `deliver` serves a frame here; frames of a connection
 * that resumes a session owned elsewhere go to the owner instead.
 */
export function fleetMessageGate(
  socket: WebSocket,
  request: FastifyRequest,
  sessions: SessionManager,
  log: Logger,
  deliver: (text: string) => void,
): (text: string) => void {
  const fleet = sessions.backend.fleet;
  if (fleet === undefined || request.headers[FORWARDED_HEADER] !== undefined) return deliver;
  let state: 'first' | 'routing' | 'local' | 'relay' = 'first';
  const queue: string[] = [];
  let upstream: WebSocket | undefined;

  const serveHere = (): void => {
    state = 'local';
    for (const text of queue.splice(0)) deliver(text);
  };
  const relay = (route: Extract<SessionRoute, { kind: 'remote' }>, id: string): void => {
    const target = new URL(request.url, route.url.replace(/^http/, 'ws'));
    const protocols = (request.headers['sec-websocket-protocol'] ?? '')
      .split(',')
      .map((p) => p.trim())
      .filter((p) => p !== '');
    const headers = relayHeaders(request, fleet.replicaId);
    const ws = new WebSocket(target, protocols, {
      headers,
      ...(request.headers.origin === undefined ? {} : { origin: request.headers.origin }),
      perMessageDeflate: false,
    });
    upstream = ws;
    let opened = false;
    ws.on('open', () => {
      opened = true;
      state = 'relay';
      for (const text of queue.splice(0)) ws.send(text);
    });
    ws.on('message', (data, isBinary) => {
      if (socket.readyState === socket.OPEN) socket.send(data as Buffer, { binary: isBinary });
    });
    ws.on('close', (code, reason) => {
      if (!opened || socket.readyState !== socket.OPEN) return;
      const passes = code === 1000 || (code >= 4000 && code < 5000);
      socket.close(
        passes ? code : OWNER_GONE,
        passes ? reason.toString() : 'the replica serving this session went away: resume it',
      );
    });
    ws.on('error', (err) => {
      if (opened) return;
      log.info(
        { sessionId: id, replica: route.replicaId, err: err.message },
        'fleet: owner unreachable, routing again',
      );
      void sessions.rerouteAfterFailure(id, request.tenant, route.url).then(
        (next) => (next.kind === 'remote' && next.url !== route.url ? relay(next, id) : serveHere()),
        () => serveHere(),
      );
    });
  };
  socket.on('close', () => upstream?.close());

  return (text) => {
    if (state === 'local') return deliver(text);
    if (state === 'relay') return upstream?.send(text);
    queue.push(text);
    if (state === 'routing') return;
    const id = resumeTarget(text);
    if (id === undefined || sessions.find(id) !== undefined) return serveHere();
    state = 'routing';
    void sessions.route(id, request.tenant).then(
      (route) => (route.kind === 'remote' ? relay(route, id) : serveHere()),
      (err: unknown) => {
        log.warn({ sessionId: id, err: (err as Error).message }, 'fleet: cannot route a resumed session');
        serveHere();
      },
    );
  };
}
