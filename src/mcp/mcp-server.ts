/**
 * One MCP server per MCP connection, on the SDK's low-level `Server`: the tools are listed with
 * the JSON Schemas of `schemas.ts` and checked with TypeBox (the SDK's `McpServer.registerTool`
 * would need every schema restated in zod).
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  CallToolRequestSchema,
  ErrorCode,
  type JSONRPCMessage,
  ListToolsRequestSchema,
  McpError,
} from '@modelcontextprotocol/sdk/types.js';
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

/** The MCP server of one MCP connection: its tools on the session it binds. */
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
    // The SDK writes the answer itself, past the HTTP hook: after its audit lines here (audit-barrier.ts).
    await context.sessions.audit.settled();
    return result;
  });
  return server;
}

/** A JSON value as a message names it: `a string`, `an array`, `null`... */
function kindOf(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * What is wrong with the params of a `tools/call` request, in one sentence; undefined when
 * nothing is, or the message is no `tools/call` request. The SDK's own check of these fields
 * answers -32603 with the schema library's dump of its issues.
 */
export function toolCallProblem(message: JSONRPCMessage): string | undefined {
  if (!('method' in message) || message.method !== 'tools/call' || !('id' in message)) return undefined;
  const params: unknown = message.params;
  if (!isPlainObject(params)) return `tools/call params must be an object {name, arguments}, not ${kindOf(params)}`;
  if (typeof params['name'] !== 'string')
    return `tools/call params.name must be the tool's name (a string), not ${kindOf(params['name'])}`;
  const args = params['arguments'];
  if (args !== undefined && !isPlainObject(args))
    return `tools/call arguments must be an object of the tool's parameters, not ${kindOf(args)}`;
  return undefined;
}

/**
 * Connects `server` to `transport`, a malformed `tools/call` (`toolCallProblem`) answered
 * -32602 with what is wrong before the SDK sees it.
 */
export async function connectMcpServer(server: Server, transport: Transport): Promise<void> {
  await server.connect(transport);
  const deliver = transport.onmessage;
  transport.onmessage = (message: JSONRPCMessage, extra) => {
    const problem = toolCallProblem(message);
    if (problem === undefined || !('id' in message)) {
      deliver?.(message, extra);
      return;
    }
    const error = { code: ErrorCode.InvalidParams, message: problem };
    void transport.send({ jsonrpc: '2.0', id: message.id, error }).catch(() => undefined);
  };
}
