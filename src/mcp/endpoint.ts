/**
 * `/mcp`: the Model Context Protocol over Streamable HTTP (the SDK's
 * `StreamableHTTPServerTransport`, stateful: one MCP connection per `Mcp-Session-Id`).
 * Authentication is the app's bearer hook; an MCP connection belongs to the tenant that opened
 * it, and for any other tenant it does not exist (404, like another tenant's session). A
 * foreign `Origin` never gets here: the app's one check refuses it (src/transport/origin.ts).
 *
 * Bounded: at most `MAX_CONNECTIONS` MCP connections (`MAX_PER_TENANT` per tenant); one idle
 * for `IDLE_MS` (no request in flight, no open stream) is closed, and with it the session it
 * created implicitly (tools.ts).
 */
import { randomUUID } from 'node:crypto';
import type { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config.ts';
import { toExecError } from '../errors.ts';
import type { TenantId } from '../ids.ts';
import type { PreviewSigner } from '../preview/signing.ts';
import { CLIENT_HEADER, clientStampFor } from '../transport/client-address.ts';
import { originOf } from '../transport/origin.ts';
import { MCP_PATH, MCP_REPLICA_SEPARATOR, MCP_SESSION_HEADER } from '../protocol/index.ts';
import { SessionBinding } from './tool-context.ts';
import { requestIds, sendDrainNotice } from './drain-notice.ts';

const MAX_CONNECTIONS = 1024;
const MAX_PER_TENANT = 64;
const IDLE_MS = 30 * 60_000;
const SWEEP_MS = 60_000;

interface McpConnection {
  readonly tenant: TenantId;
  readonly transport: StreamableHTTPServerTransport;
  readonly server: Server;
  readonly binding: SessionBinding;
  id: string | undefined;
  inFlight: number;
  /** JSON-RPC ids of the requests in flight (their response streams get the drain notice). */
  readonly requests: Set<string | number>;
  /** Takes the connection off the drain's list. */
  undrain: (() => void) | undefined;
  lastSeen: number;
  closed: boolean;
}

/** A new MCP session id: a UUID, after the id of the replica that holds it in a fleet. */
function mcpSessionId(replicaId: string | undefined): string {
  return replicaId === undefined ? randomUUID() : `${replicaId}${MCP_REPLICA_SEPARATOR}${randomUUID()}`;
}

/**
 * The MCP SDK (and the schema library under it), loaded at the first `/mcp` request rather than
 * with the server: tens of MB of an idle server's memory that a server nobody reaches over MCP
 * never needs (docs/benchmarks.md, "Many sessions and server memory").
 */
let runtime:
  | Promise<{
      Transport: typeof StreamableHTTPServerTransport;
      isInitializeRequest: (body: unknown) => boolean;
      createMcpServer: typeof import('./mcp-server.ts').createMcpServer;
      connectMcpServer: typeof import('./mcp-server.ts').connectMcpServer;
    }>
  | undefined;
function mcpRuntime(): NonNullable<typeof runtime> {
  runtime ??= Promise.all([
    import('@modelcontextprotocol/sdk/server/streamableHttp.js'),
    import('@modelcontextprotocol/sdk/types.js'),
    import('./mcp-server.ts'),
  ]).then(([t, types, server]) => ({
    Transport: t.StreamableHTTPServerTransport,
    isInitializeRequest: types.isInitializeRequest,
    createMcpServer: server.createMcpServer,
    connectMcpServer: server.connectMcpServer,
  }));
  return runtime;
}

function rpcError(reply: FastifyReply, status: number, code: number, message: string): FastifyReply {
  return reply
    .code(status)
    .header('content-type', 'application/json')
    .send({ jsonrpc: '2.0', error: { code, message }, id: null });
}

/**
 * A request outside any MCP connection that is not an `initialize` the SDK takes: one whose
 * params it refuses is told so ("initialize first" would send its client in circles).
 */
function withoutConnection(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  if (request.method === 'POST' && (request.body as { method?: unknown } | null)?.method === 'initialize')
    return rpcError(
      reply,
      400,
      -32602,
      'invalid initialize params: protocolVersion (a string), capabilities (an object) and clientInfo {name, version} are required',
    );
  return rpcError(reply, 400, -32600, 'no Mcp-Session-Id header: initialize first');
}

/** A new MCP connection of `tenant` (bound to `sessionId` if given), kept in `connections` once initialized. */
async function openConnection(
  on: {
    app: FastifyInstance;
    opts: { config: Config; signer: PreviewSigner };
    connections: Map<string, McpConnection>;
    close: (conn: McpConnection) => Promise<void>;
  },
  tenant: TenantId,
  sessionId: string | undefined,
  origin: string | undefined,
): Promise<McpConnection> {
  const { app, opts, connections, close } = on;
  const { Transport, createMcpServer } = await mcpRuntime();
  const binding = new SessionBinding(sessionId);
  const server = createMcpServer({
    sessions: app.sessions,
    config: opts.config,
    tenant,
    binding,
    signer: opts.signer,
    origin,
  });
  const conn: McpConnection = {
    tenant,
    binding,
    server,
    id: undefined,
    inFlight: 0,
    requests: new Set(),
    undrain: undefined,
    lastSeen: Date.now(),
    closed: false,
    transport: new Transport({
      // In a fleet the id names the replica that holds the connection: any replica forwards to it.
      sessionIdGenerator: () => mcpSessionId(app.sessions.backend.fleet?.replicaId),
      onsessioninitialized: (id) => {
        conn.id = id;
        connections.set(id, conn);
        // A rollout: the client is told on every stream it has open (drain-notice.ts).
        conn.undrain = app.drain.add({
          notify: (note) => void sendDrainNotice(server, note, binding.sessionId, conn.requests),
          // Nothing to close here: the server's close ends the streams, and the MCP session id
          // is unknown everywhere after that (404: the client initializes again).
          close: () => {},
        });
      },
      // Awaited by the SDK: DELETE /mcp answers once the implicit sessions are destroyed.
      onsessionclosed: () => close(conn),
    }),
  };
  conn.transport.onclose = () => void close(conn);
  return conn;
}

export function registerMcpEndpoint(app: FastifyInstance, opts: { config: Config; signer: PreviewSigner }): void {
  const connections = new Map<string, McpConnection>();

  /** Ends an MCP connection and, unless the server is shutting down anyway, the sessions it made implicitly. */
  const close = async (conn: McpConnection, shutdown = false): Promise<void> => {
    if (conn.closed) return;
    conn.closed = true;
    conn.undrain?.();
    if (conn.id !== undefined) connections.delete(conn.id);
    await conn.server.close().catch(() => {});
    if (!shutdown)
      await Promise.all([...conn.binding.implicit].map((id) => app.sessions.destroy(id, conn.tenant).catch(() => {})));
  };

  const sweeper = setInterval(() => {
    const now = Date.now();
    for (const conn of [...connections.values()])
      if (conn.inFlight === 0 && now - conn.lastSeen > IDLE_MS) void close(conn);
  }, SWEEP_MS);
  sweeper.unref();
  app.addHook('preClose', async () => {
    clearInterval(sweeper);
    // The session manager removes every session on shutdown itself.
    await Promise.all([...connections.values()].map((conn) => close(conn, true)));
  });

  const open = (tenant: TenantId, sessionId: string | undefined, origin: string | undefined): Promise<McpConnection> =>
    openConnection({ app, opts, connections, close }, tenant, sessionId, origin);

  const handle = async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> => {
    const header = request.headers['mcp-session-id'];
    let conn: McpConnection | undefined;
    const { isInitializeRequest, connectMcpServer } = await mcpRuntime();
    if (typeof header === 'string') {
      conn = connections.get(header);
      if (!conn || conn.tenant !== request.tenant) return rpcError(reply, 404, -32001, 'MCP session not found');
    } else if (request.method === 'POST' && isInitializeRequest(request.body)) {
      const owned = [...connections.values()].filter((c) => c.tenant === request.tenant).length;
      if (connections.size >= MAX_CONNECTIONS || owned >= MAX_PER_TENANT)
        return rpcError(
          reply,
          429,
          -32600,
          `too many MCP connections (${owned} of ${MAX_PER_TENANT} for this tenant, ${connections.size} of ${MAX_CONNECTIONS} in all)`,
        );
      const bound = request.headers[MCP_SESSION_HEADER];
      if (bound !== undefined && typeof bound !== 'string')
        return rpcError(reply, 400, -32602, `one ${MCP_SESSION_HEADER} header at most`);
      try {
        if (bound !== undefined) app.sessions.get(bound, request.tenant);
      } catch (err) {
        return rpcError(reply, 404, -32602, `${MCP_SESSION_HEADER}: ${toExecError(err).message}`);
      }
      conn = await open(request.tenant, bound, originOf(request.raw));
      await connectMcpServer(conn.server, conn.transport);
    } else {
      return withoutConnection(request, reply);
    }
    conn.inFlight++;
    conn.lastSeen = Date.now();
    const current = conn;
    const ids = request.method === 'POST' ? requestIds(request.body) : [];
    for (const id of ids) current.requests.add(id);
    reply.raw.once('close', () => {
      for (const id of ids) current.requests.delete(id);
      current.inFlight--;
      current.lastSeen = Date.now();
    });
    reply.hijack();
    // For a tool call run on another replica (the SDK passes it only the headers): client-address.ts.
    request.raw.headers[CLIENT_HEADER] = clientStampFor(request);
    await conn.transport.handleRequest(request.raw, reply.raw, request.body);
    return undefined;
  };

  const route = { schema: { hide: true } };
  app.post(MCP_PATH, route, handle);
  app.get(MCP_PATH, route, handle);
  app.delete(MCP_PATH, route, handle);
}
