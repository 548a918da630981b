/**
 * One MCP server per MCP connection, on the SDK's low-level `Server`: the tools are listed with
 * the JSON Schemas of `schemas.ts` and checked with TypeBox (the SDK's `McpServer.registerTool`
 * would need every schema restated in zod).
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { VERSION } from '../version.ts';
import type { ToolContext } from './tool-context.ts';
import { CLIENT_HEADER } from '../transport/client-address.ts';
import { callOnOwner } from './forwarded-calls.ts';
import { callTool, toolList } from './tools.ts';

const INSTRUCTIONS = [
  'exec-server runs commands in an isolated session (a container, or a sandboxed workspace).',
  'exec_command runs a shell command; one still running after yield_time_ms answers a session_id for write_stdin.',
  'read_file, write_file and list_dir work on the same session; relative paths are under its workspace.',
  'A result asking for approval names an approval_id: ask the user, then call decide_approval.',
].join(' ');

export function createMcpServer(ctx: Omit<ToolContext, 'clientName'>): Server {
  const server = new Server(
    { name: 'exec-server', version: VERSION },
    // `logging`: the one notification a client is told a rollout by (drain-notice.ts).
    { capabilities: { tools: {}, logging: {} }, instructions: INSTRUCTIONS },
  );
  const context: ToolContext = {
    ...ctx,
    get clientName() {
      return server.getClientVersion()?.name;
    },
  };
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: toolList() }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const token = request.params._meta?.progressToken;
    const progress: ToolContext['progress'] =
      token === undefined
        ? undefined
        : (value, total, message) =>
            void extra
              .sendNotification({
                method: 'notifications/progress',
                params: { progressToken: token, progress: value, ...(total !== undefined ? { total } : {}), message },
              })
              .catch(() => undefined);
    const authorization = extra.requestInfo?.headers.authorization;
    const call: ToolContext = {
      ...context,
      clientName: context.clientName,
      progress,
      authorization: typeof authorization === 'string' ? authorization : undefined,
    };
    const { name, arguments: args } = request.params;
    const stamped = extra.requestInfo?.headers[CLIENT_HEADER];
    const from = {
      signal: extra.signal,
      client: typeof stamped === 'string' ? stamped : undefined,
    };
    // In a fleet, a call for a session another replica owns runs there (forwarded-calls.ts).
    const result = (await callOnOwner(name, args, call, from)) ?? (await callTool(name, args, call));
    if (result === undefined)
      throw new McpError(ErrorCode.InvalidParams, `unknown tool ${JSON.stringify(request.params.name)}`);
    return result;
  });
  return server;
}
