/**
 * WebSocket sessions in a fleet (docs/architecture.md, "Fleet"): a connection whose first
 * message is `initialize` with the `resumeSessionId` of a session another live replica owns is
 * relayed, frame for frame, to a WebSocket of the caller's on that replica; one whose owner's
 * lease is gone is taken over here first. Everything else is served here as usual.
 *
 * A relay holds a bounded number of bytes: past `RELAY_HIGH_WATER` unsent to one side it stops
 * reading the other (`forward`), and frames queued while the session is routed stop the client's
 * reading likewise. A relayed client that stops reading thus backs up into the owner, whose flow
 * control pauses the session's output and whose stall timeout cuts it (4001), as for a client
 * of its own (docs/protocol.md, "Transport").
 */
import type { FastifyRequest } from 'fastify';
import { WebSocket } from 'ws';
import { type ExecServerError, execError, rpcErrorBody } from '../errors.ts';
import type { Logger } from '../logger.ts';
import type { SessionManager, SessionRoute } from '../sessions/session-manager.ts';
import { CLIENT_HEADER, clientStampFor } from './client-address.ts';
import { FORWARDED_HEADER } from './fleet-forward.ts';
import { OWNER_SILENCE_MS, watchOwner } from './owner-watch.ts';

/** Close code for a relayed connection whose replica went away: resume the session (any replica). */
const OWNER_GONE = 1012;

/** Bytes a relay lets wait for one side before it stops reading the other. */
const RELAY_HIGH_WATER = 4 * 1024 * 1024;

/**
 * Sends a frame of `from`'s to `to`, and stops reading `from` while `to` has more than
 * RELAY_HIGH_WATER unsent; reading goes on once `to` is down to a quarter of it.
 */
function forward(from: WebSocket, to: WebSocket, data: Buffer | string, binary: boolean): void {
  if (to.readyState !== to.OPEN) return;
  to.send(data, { binary }, () => {
    if (from.isPaused && to.bufferedAmount <= RELAY_HIGH_WATER / 4) from.resume();
  });
  if (to.bufferedAmount > RELAY_HIGH_WATER && !from.isPaused) from.pause();
}

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

/** The answer to a queued frame that is a request (it has an id): `err`; undefined for a notification. */
function errorAnswer(text: string, err: ExecServerError): string | undefined {
  try {
    const msg = JSON.parse(text) as { id?: unknown; method?: unknown; jsonrpc?: unknown };
    if (typeof msg.method !== 'string' || msg.id === undefined || msg.id === null) return undefined;
    return JSON.stringify({
      ...(msg.jsonrpc === '2.0' ? { jsonrpc: '2.0' } : {}),
      id: msg.id,
      error: rpcErrorBody(err),
    });
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

/** How a relay's handshake with the owner ends. */
interface RelayEnds {
  /** The owner took the upgrade: frames go to `ws` from now on. */
  opened(ws: WebSocket): void;
  /** The owner answered neither the upgrade nor its `/healthz` for OWNER_SILENCE_MS. */
  silent(): void;
  /** The upgrade failed otherwise (refused, reset): the session may have moved. */
  failed(err: Error): void;
}

/**
 * A WebSocket of the caller's on the owner at `route`: its frames and its close go to `socket`.
 * A paused or wedged owner accepts the connection (the kernel does) and keeps its lease, but
 * never answers the upgrade: its `/healthz` is watched meanwhile, as for a forwarded HTTP call
 * (fleet-forward.ts). The watch ends with the handshake, so an open relay, idle or busy, is
 * never cut by it.
 */
function openRelay(
  socket: WebSocket,
  request: FastifyRequest,
  route: Extract<SessionRoute, { kind: 'remote' }>,
  replicaId: string,
  ends: RelayEnds,
): WebSocket {
  const target = new URL(request.url, route.url.replace(/^http/, 'ws'));
  const protocols = (request.headers['sec-websocket-protocol'] ?? '')
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '');
  const ws = new WebSocket(target, protocols, {
    headers: relayHeaders(request, replicaId),
    ...(request.headers.origin === undefined ? {} : { origin: request.headers.origin }),
    perMessageDeflate: false,
  });
  let opened = false;
  let silenced = false;
  const unwatch = watchOwner(route.url, () => {
    silenced = true;
    ws.terminate();
  });
  ws.on('open', () => {
    unwatch();
    opened = true;
    ends.opened(ws);
  });
  ws.on('message', (data, isBinary) => forward(ws, socket, data as Buffer, isBinary));
  ws.on('close', (code, reason) => {
    unwatch();
    if (!opened || socket.readyState !== socket.OPEN) return;
    const passes = code === 1000 || (code >= 4000 && code < 5000);
    socket.close(
      passes ? code : OWNER_GONE,
      passes ? reason.toString() : 'the replica serving this session went away: resume it',
    );
  });
  ws.on('error', (err) => {
    if (opened) return;
    if (silenced) ends.silent();
    else ends.failed(err);
  });
  return ws;
}

/**
 * The frames of a connection waiting for its session's route. A client that sends on meanwhile
 * is not read past RELAY_HIGH_WATER queued, instead of filling the queue; `drain` reads it again.
 */
function routingQueue(socket: WebSocket): { push(text: string): void; drain(): string[] } {
  const queue: string[] = [];
  let queued = 0;
  return {
    push(text) {
      queue.push(text);
      queued += text.length;
      if (queued > RELAY_HIGH_WATER && !socket.isPaused) socket.pause();
    },
    drain() {
      queued = 0;
      if (socket.isPaused) socket.resume();
      return queue.splice(0);
    },
  };
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
  const queue = routingQueue(socket);
  let upstream: WebSocket | undefined;

  const serveHere = (): void => {
    state = 'local';
    for (const text of queue.drain()) deliver(text);
  };
  // The requests waiting for the relay fail with `err`, as a forwarded HTTP call gets 503. None
  // reached the owner nor a session here, so the connection may initialize again.
  const refuse = (err: ExecServerError): void => {
    state = 'first';
    upstream = undefined;
    for (const text of queue.drain()) {
      const answer = errorAnswer(text, err);
      if (answer !== undefined && socket.readyState === socket.OPEN) socket.send(answer);
    }
  };
  const relay = (route: Extract<SessionRoute, { kind: 'remote' }>, id: string): void => {
    upstream = openRelay(socket, request, route, fleet.replicaId, {
      opened: (ws) => {
        state = 'relay';
        for (const text of queue.drain()) forward(socket, ws, text, false);
      },
      silent: () => {
        log.warn({ sessionId: id, replica: route.replicaId }, 'fleet: owner silent, relay refused');
        const silence = `no answer for ${OWNER_SILENCE_MS / 1000} s, nor from its /healthz`;
        refuse(execError('EXEC_ERR_BACKEND_UNAVAILABLE', `the replica serving this session failed: ${silence}`));
      },
      failed: (err) => {
        log.info(
          { sessionId: id, replica: route.replicaId, err: err.message },
          'fleet: owner unreachable, routing again',
        );
        void sessions.rerouteAfterFailure(id, request.tenant, route.url).then((next) => {
          if (next.kind !== 'remote') return serveHere();
          if (next.url !== route.url) return relay(next, id);
          // Its lease lives on and its URL still refuses: served here, `initialize` would say the
          // session does not exist. Answered as a forwarded HTTP call is (503 there).
          refuse(
            execError('EXEC_ERR_BACKEND_UNAVAILABLE', `the replica ${route.replicaId} does not answer: ${err.message}`),
          );
        }, serveHere);
      },
    });
  };
  socket.on('close', () => upstream?.close());

  return (text) => {
    if (state === 'local') return deliver(text);
    if (state === 'relay') return upstream && forward(socket, upstream, text, false);
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
