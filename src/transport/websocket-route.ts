/**
 * The WebSocket endpoint (`/` and `/v1/ws`): one JSON-RPC message per text frame. Auth ran in
 * the onRequest hook, before the upgrade. A client that falls behind makes its session's
 * commands wait (flow control in Connection); one that stays behind past the stall timeout,
 * or has more than `wsBufferLimitBytes` unread, is cut off (close code 4001); its processes
 * keep running and it can resume the session.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { WebSocket } from 'ws';
import { execError, rpcErrorBody } from '../errors.ts';
import type { Metrics } from '../metrics.ts';
import { Connection, type ConnectionDeps } from '../rpc/connection.ts';
import type { MethodTable } from '../rpc/method-table.ts';
import { RpcPeer, type RpcTransport } from '../rpc/rpc-peer.ts';
import { auditBarrier } from '../audit/audit-barrier.ts';
import type { TenantWebSockets } from './connection-limits.ts';
import { actorStore, type Auditor } from '../audit/auditor.ts';
import { actorOf } from './auth-hook.ts';
import { DRAIN_CLOSE_CODE, type Drain } from './drain.ts';
import { fleetMessageGate } from './fleet-ws.ts';

/** Close codes the server uses (also in docs/protocol.md). */
export const CloseCode = {
  evicted: 4000,
  slowConsumer: 4001,
  initializeTimeout: 4002,
  shutdown: 1001,
  tooBig: 1009,
  draining: DRAIN_CLOSE_CODE,
} as const;

export interface WebSocketRouteOptions {
  readonly table: MethodTable<Connection>;
  readonly deps: Omit<ConnectionDeps, 'tenant' | 'log' | 'principal'>;
  readonly metrics: Metrics;
  readonly bufferLimitBytes: number;
  /** Each tenant's WebSocket places (connection-limits.ts): an upgrade past them is refused. */
  readonly tenantSockets: TenantWebSockets;
  /** Told of every open connection, to send it away on a rollout. */
  readonly drain?: Drain | undefined;
}

/** The answer to a binary frame from a client: the protocol is JSON text frames. */
const BINARY_REFUSED = JSON.stringify({
  id: null,
  error: rpcErrorBody(
    execError('EXEC_ERR_INVALID_REQUEST', 'invalid request: binary frames are not supported; send JSON text frames'),
  ),
});

type Write = (data: string | Buffer, binary: boolean, sent: (() => void) | undefined) => void;

/**
 * The peer's sends: with `--audit-log`, each after the audit lines recorded before it
 * (audit-barrier.ts); without, straight to the socket, with no closure per output frame.
 */
function transportOf(audit: Auditor, write: Write): RpcTransport {
  // A Buffer is JSON text already encoded (the output hot path): still a text frame.
  if (!audit.enabled)
    return { send: (text, sent) => write(text, false, sent), sendBinary: (frame, sent) => write(frame, true, sent) };
  const afterAudit = auditBarrier(audit);
  return {
    send: (text, sent) => afterAudit(() => write(text, false, sent)),
    sendBinary: (frame, sent) => afterAudit(() => write(frame, true, sent)),
  };
}

export function registerWebSocketRoute(app: FastifyInstance, opts: WebSocketRouteOptions): void {
  const wsHandler = webSocketHandler(opts);
  const preHandler = opts.tenantSockets.take;
  for (const url of ['/', '/v1/ws'])
    app.route({ method: 'GET', url, schema: { hide: true }, preHandler, handler: hello, wsHandler });
}

/** What serves one upgraded connection: its JSON-RPC peer, flow control and close. */
function webSocketHandler(opts: WebSocketRouteOptions): (socket: WebSocket, request: FastifyRequest) => void {
  return (socket, request) => {
    const log = request.log.child({ tenant: request.tenant });
    opts.metrics.wsConnections.inc();
    const close = (code: number, reason: string): void => {
      if (socket.readyState === socket.OPEN || socket.readyState === socket.CONNECTING)
        socket.close(code, reason.slice(0, 120));
    };
    const conn = new Connection({ ...opts.deps, tenant: request.tenant, principal: request.principal, log }, close);
    const actor = actorOf(request);
    const peer = new RpcPeer<Connection>({
      table: opts.table,
      ctx: conn,
      log,
      metrics: opts.metrics,
      gate: (method, requires) => conn.gate(method, requires),
      onNotification: (method, params) => conn.onNotification(method, params),
      transport: transportOf(opts.deps.sessions.audit, (data, binary, sent) => write(data, binary, sent)),
    });
    conn.bindPeer(peer);
    const flushed = (): void => conn.flowCheck(socket.bufferedAmount);
    // ws calls back once the socket has written a frame (or failed): only then may it be reused.
    const batch = tickBatcher(socket);
    const write = (data: string | Buffer, binary: boolean, sent: (() => void) | undefined): void => {
      if (socket.readyState !== socket.OPEN) return;
      if (socket.bufferedAmount > opts.bufferLimitBytes) {
        cutSlowConsumer(`more than ${opts.bufferLimitBytes} bytes unread`);
        return;
      }
      // Replies and notifications (text) of one tick leave in one write; output frames (Buffers)
      // go as before, after what is batched.
      if (typeof data === 'string') batch.hold();
      else batch.release();
      socket.send(
        data,
        { binary },
        sent
          ? () => {
              flushed();
              sent();
            }
          : flushed,
      );
      conn.flowCheck(socket.bufferedAmount);
    };
    const cutSlowConsumer = (why: string): void => {
      opts.metrics.wsSlowConsumers.inc();
      log.warn({ buffered: socket.bufferedAmount, why }, 'slow consumer disconnected');
      conn.closed();
      close(CloseCode.slowConsumer, `slow consumer: ${why}; resume the session and read from your last seq`);
    };
    conn.onStall(() => cutSlowConsumer('behind for longer than the stall timeout'));
    const firstMessage = initializeDeadline(socket, opts, close);
    const stopHeartbeat = heartbeat(socket, opts, log);
    const undrain = opts.drain?.add({ notify: (params) => peer.notify('server/draining', params), close });
    // In a fleet, a connection resuming another replica's session is relayed there (fleet-ws.ts).
    const handle = fleetMessageGate(socket, request, opts.deps.sessions, log, (text) =>
      actorStore.run(actor, () => peer.handleFrame(text)),
    );
    // Listeners attach synchronously, before any await, or early frames would be lost.
    socket.on('message', (data, isBinary) => {
      firstMessage.arrived();
      // Through `write`, as every other answer: a client sending binary frames without reading the
      // refusals is cut at the buffer limit instead of having them pile up in server memory.
      if (isBinary) return void write(BINARY_REFUSED, false, undefined);
      const text = Array.isArray(data) ? Buffer.concat(data).toString('utf8') : data.toString('utf8');
      // Everything the message does is this caller's, for the audit log.
      handle(text);
    });
    socket.on('close', () => {
      firstMessage.arrived();
      stopHeartbeat();
      undrain?.();
      opts.metrics.wsConnections.dec();
      peer.close();
      conn.closed();
    });
    socket.on('error', (err) => log.debug({ err }, 'websocket error'));
  };
}

/**
 * A WebSocket whose peer vanished without a close (a client machine lost, a partition, a NAT
 * that forgot the flow) would hold its places (`--max-connections`, the tenant's WebSockets)
 * until the kernel gave up on it, which on an idle socket is never. Every
 * `--ws-ping-interval-ms` it is pinged (every client library answers a ping by itself); one that
 * sent nothing since the last ping is dropped. A socket still writing to its client is spared:
 * the ping waits behind that output, and the stall timeout judges a client that does not read.
 * One per socket (an unref'd interval): 1,000 sockets are 33 timers a second at the default.
 * Returns the stop.
 */
function heartbeat(socket: WebSocket, opts: WebSocketRouteOptions, log: FastifyRequest['log']): () => void {
  const ms = opts.deps.config.wsPingIntervalMs;
  if (ms === 0) return () => undefined;
  let heard = true;
  const alive = (): void => {
    heard = true;
  };
  socket.on('pong', alive);
  socket.on('message', alive);
  const timer = setInterval(() => {
    if (socket.readyState !== socket.OPEN) return;
    // Not read by this server for a while (a relay holding back a fast sender): its pongs wait unread.
    if (!heard && socket.bufferedAmount === 0 && !socket.isPaused) {
      opts.metrics.connectionsRefused.inc({ limit: 'ping' });
      log.info({ intervalMs: ms }, 'websocket peer answered no ping: dropped');
      socket.terminate();
      return;
    }
    heard = false;
    socket.ping();
  }, ms);
  timer.unref();
  return () => clearInterval(timer);
}

/** How long a WebSocket closed for its silence has to answer the close before its socket is dropped. */
const SILENT_CLOSE_GRACE_MS = 1000;

/**
 * A WebSocket holds one of the server's places (`--max-connections`) and one of its tenant's:
 * one that says nothing after the upgrade is closed (4002) within `--ws-initialize-timeout-ms`,
 * and its socket dropped a moment later if it does not answer the close either (ws would wait
 * 30 s for that). Only the first message is awaited: once a client has spoken it may stay idle
 * as long as it likes (a session's client waits for its commands, and the server sends no pings).
 */
function initializeDeadline(
  socket: WebSocket,
  opts: WebSocketRouteOptions,
  close: (code: number, reason: string) => void,
): { arrived(): void } {
  const ms = opts.deps.config.wsInitializeTimeoutMs;
  const timer = setTimeout(() => {
    opts.metrics.connectionsRefused.inc({ limit: 'initialize' });
    close(CloseCode.initializeTimeout, `no message within ${ms} ms of the upgrade; send initialize first`);
    setTimeout(() => socket.terminate(), SILENT_CLOSE_GRACE_MS).unref();
  }, ms);
  timer.unref();
  return { arrived: () => clearTimeout(timer) };
}

/**
 * Holds a WebSocket's small frames of one tick in its TCP socket (cork) and lets them go in one
 * write at the end of the tick (`process.nextTick`). A command's exit is two notifications
 * (`process/exited`, then `process/closed`): sent apart they cost the server two writes and the
 * client two wake-ups, a good part of a short command's round trip on a small machine.
 */
function tickBatcher(ws: WebSocket): { hold(): void; release(): void } {
  // ws keeps its TCP socket in `_socket` (no public accessor); without one nothing is held.
  const tcp = (ws as unknown as { _socket?: { cork(): void; uncork(): void; destroyed: boolean } })._socket;
  let held = false;
  const release = (): void => {
    if (!held) return;
    held = false;
    if (tcp && !tcp.destroyed) tcp.uncork();
  };
  return {
    hold() {
      if (held || !tcp || tcp.destroyed) return;
      held = true;
      tcp.cork();
      process.nextTick(release);
    },
    release,
  };
}

/** What a plain GET of the WebSocket URLs answers. */
async function hello(): Promise<{ name: string; websocket: boolean; docs: string }> {
  return { name: 'exec-server', websocket: true, docs: '/docs/openapi.json' };
}
