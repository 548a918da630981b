/**
 * `exec-server mcp --url ws://HOST:PORT`: the MCP endpoint of a running server on stdio, for
 * MCP clients that start their servers as a command (desktop agents). Every message is
 * forwarded as it is between the SDK's stdio server transport and its Streamable HTTP client
 * transport to `/mcp`; the server does all the work. A request the server cannot be reached
 * for is answered on stdio with a JSON-RPC error naming why, so the agent sees it.
 */
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { connectionOf, connectionOptions, describeError, parse, printError, UsageError } from './common.ts';

const HELP = `Usage: exec-server mcp [--url ws://HOST:PORT] [--token TOKEN] [--session ID]

Serves the MCP endpoint of a running exec-server on stdin/stdout (an MCP server "command").
  --url      the server (ws://, wss://, http:// or https://; /mcp is added to a bare address;
             default EXEC_SERVER_URL, else ws://127.0.0.1:8765)
  --token    bearer token (default EXEC_SERVER_TOKEN)
  --session  work on this existing exec-server session (X-Exec-Session)
`;

/** The `/mcp` URL of a server address given as ws(s):// or http(s)://. */
export function mcpUrl(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UsageError(`--url: ${JSON.stringify(raw)} is not a URL`);
  }
  const scheme = { 'ws:': 'http:', 'wss:': 'https:', 'http:': 'http:', 'https:': 'https:' }[url.protocol];
  if (scheme === undefined) throw new UsageError(`--url: unsupported scheme ${url.protocol} (ws, wss, http or https)`);
  const out = new URL(url.href.replace(/^[a-z]+:/, scheme));
  if (out.pathname === '/' || out.pathname === '') out.pathname = '/mcp';
  return out;
}

function isRequest(m: JSONRPCMessage): m is JSONRPCMessage & { id: string | number; method: string } {
  return 'method' in m && 'id' in m && m.id !== undefined;
}

function parseMcpArgs(args: string[]) {
  const { values, positionals } = parse(args, { ...connectionOptions, session: { type: 'string' } });
  // A bare address (`exec-server mcp ws://...`) would otherwise be ignored for the default one.
  if (positionals.length > 0)
    throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}; the server is given with --url`);
  return values;
}

/** `exec-server mcp`: relays MCP between stdio and a running server's `/mcp`. */
export async function mcpCommand(args: string[]): Promise<number> {
  let values: ReturnType<typeof parseMcpArgs>;
  let url: URL;
  try {
    values = parseMcpArgs(args);
    if (values.help) {
      process.stdout.write(HELP);
      return 0;
    }
    url = mcpUrl(connectionOf(values).url);
  } catch (err) {
    return printError(err, false);
  }
  const { token } = connectionOf(values);
  const headers: Record<string, string> = {};
  if (token !== undefined) headers['authorization'] = `Bearer ${token}`;
  if (values.session !== undefined) headers['x-exec-session'] = values.session;

  const remote = new StreamableHTTPClientTransport(url, { requestInit: { headers } });
  const local = new StdioServerTransport();
  const initializeIds = new Set<string | number>();

  remote.onmessage = (message) => {
    // The protocol version the server chose travels on every later request (Mcp-Protocol-Version).
    if ('id' in message && message.id !== undefined && initializeIds.delete(message.id) && 'result' in message) {
      const version = (message.result as { protocolVersion?: unknown }).protocolVersion;
      if (typeof version === 'string') remote.setProtocolVersion(version);
    }
    void local.send(message).catch(() => {});
  };
  remote.onerror = (err) => process.stderr.write(`exec-server mcp: ${describeError(err)}\n`);
  local.onmessage = (message) => {
    if (isRequest(message) && message.method === 'initialize') initializeIds.add(message.id);
    remote.send(message).catch((err: unknown) => {
      const why = `exec-server at ${url.origin}: ${describeError(err)}`;
      process.stderr.write(`exec-server mcp: ${why}\n`);
      if (isRequest(message))
        void local.send({ jsonrpc: '2.0', id: message.id, error: { code: -32000, message: why } }).catch(() => {});
    });
  };

  await remote.start();
  await local.start();
  // The SDK's stdio transport does not watch for the end of stdin; the agent closing it ends the bridge.
  await new Promise<void>((resolve) => {
    process.stdin.once('end', resolve);
    process.stdin.once('close', resolve);
  });
  await remote.terminateSession().catch(() => {});
  await Promise.all([remote.close(), local.close()]).catch(() => {});
  return 0;
}
