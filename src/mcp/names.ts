/**
 * Names of the MCP endpoint that modules loaded at startup need (the endpoint itself, with the
 * MCP SDK behind it, is loaded on first use: see app.ts).
 */
export const MCP_PATH = '/mcp';
/** Header naming the exec-server session an MCP connection works on (read at initialize). */
export const SESSION_HEADER = 'x-exec-session';
/** Separates the replica from the rest of an MCP session id in a fleet (replica ids have no `~`). */
export const MCP_REPLICA_SEPARATOR = '~';
/**
 * `POST /v1/sessions/{id}/mcp-call`: where a replica runs an MCP tool call for a session it
 * owns, on behalf of the replica that holds the MCP connection (forwarded-calls.ts).
 */
export const MCP_CALL_SUFFIX = '/mcp-call';
