/**
 * What an MCP client is told when its replica drains (a rollout, src/transport/drain.ts). MCP's
 * Streamable HTTP lets a server speak only on an open SSE stream: the client's standalone GET
 * stream, if it opened one (the SDK clients do after `initialize`), and the response stream of
 * each request still in flight. Both get one `notifications/message` (MCP logging, level
 * `warning`, logger `exec-server`) whose `data` is the WebSocket's `server/draining` params plus
 * `event: "server/draining"` and the session the connection works on. There is no close code to
 * send: the MCP connection lives on this replica, so once it is gone every replica answers 404
 * for its `Mcp-Session-Id`, which MCP clients must answer with a new `initialize`; with the
 * `x-exec-session` header named in the notice it continues on the same session.
 */
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { DrainingNotification } from '../protocol/index.ts';
import { MCP_SESSION_HEADER } from '../protocol/index.ts';

/** The `data` of the notice. */
export interface McpDrainingData extends DrainingNotification {
  readonly event: 'server/draining';
  /** The exec-server session this MCP connection works on, if it has one yet. */
  readonly sessionId?: string;
  /** The header that binds a new MCP connection to that session. */
  readonly sessionHeader: string;
}

/** JSON-RPC request ids in a POST body (one message or a batch); notifications carry none. */
export function requestIds(body: unknown): Array<string | number> {
  const messages = Array.isArray(body) ? body : [body];
  const out: Array<string | number> = [];
  for (const m of messages) {
    if (typeof m !== 'object' || m === null) continue;
    const { id, method } = m as { id?: unknown; method?: unknown };
    if (typeof method === 'string' && (typeof id === 'string' || typeof id === 'number')) out.push(id);
  }
  return out;
}

/**
 * Sends the notice on the standalone stream and on the stream of every request in `inFlight`.
 * A stream that is gone is skipped; this never throws.
 */
export async function sendDrainNotice(
  server: Pick<Server, 'notification'>,
  note: DrainingNotification,
  sessionId: string | undefined,
  inFlight: Iterable<string | number>,
): Promise<void> {
  const data: McpDrainingData = {
    event: 'server/draining',
    ...note,
    ...(sessionId === undefined ? {} : { sessionId }),
    sessionHeader: MCP_SESSION_HEADER,
  };
  const notification = {
    method: 'notifications/message' as const,
    params: { level: 'warning' as const, logger: 'exec-server', data },
  };
  const sends = [undefined, ...inFlight].map((relatedRequestId) =>
    server
      .notification(notification, relatedRequestId === undefined ? undefined : { relatedRequestId })
      .catch(() => {}),
  );
  await Promise.all(sends);
}
