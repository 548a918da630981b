/** An official MCP SDK client against a real server, and readers for its tool results. */
import type { TestContext } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';

export interface McpOptions {
  readonly token?: string;
  readonly headers?: Record<string, string>;
  readonly name?: string;
}

/** A connected SDK client, closed in t.after. */
export async function mcpClient(
  t: TestContext,
  httpUrl: string,
  opts: McpOptions = {},
): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.token !== undefined) headers['authorization'] = `Bearer ${opts.token}`;
  const transport = new StreamableHTTPClientTransport(new URL(`${httpUrl}/mcp`), { requestInit: { headers } });
  const client = new Client({ name: opts.name ?? 'exec-server-mcp-tests', version: '1.0.0' });
  await client.connect(transport);
  t.after(async () => {
    await transport.terminateSession().catch(() => {});
    await client.close();
  });
  return { client, transport };
}

/** The text blocks of a tool result, joined. */
export function textOf(result: unknown): string {
  const r = result as CallToolResult;
  return r.content.map((c) => (c.type === 'text' ? c.text : `[${c.type}]`)).join('\n');
}

/** A tool call; `T` is the structured content the test expects of that tool (by default, fields of any type). */
export async function call<T extends object = Record<string, unknown>>(
  client: Client,
  name: string,
  args: Record<string, unknown> = {},
): Promise<CallToolResult & { structuredContent?: Partial<T> }> {
  return (await client.callTool({ name, arguments: args })) as CallToolResult & { structuredContent?: Partial<T> };
}
