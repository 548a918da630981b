/**
 * The MCP endpoint's names on the wire (docs/mcp.md): its path, the header that binds a session,
 * how a fleet's MCP session ids name their replica, and the route one replica runs another's
 * tool calls on. Here rather than with the endpoint, whose MCP SDK is loaded on first use
 * (app.ts), because the transport's fleet routing needs them from the start.
 */
export const MCP_PATH = '/mcp';
/** Header naming the exec-server session an MCP connection works on (read at initialize). */
export const MCP_SESSION_HEADER = 'x-exec-session';
/** Separates the replica from the rest of an MCP session id in a fleet (replica ids have no `~`). */
export const MCP_REPLICA_SEPARATOR = '~';
/**
 * `POST /v1/sessions/{id}/mcp-call`: where a replica runs an MCP tool call for a session it
 * owns, on behalf of the replica that holds the MCP connection (src/mcp/forwarded-calls.ts).
 */
export const MCP_CALL_SUFFIX = '/mcp-call';
