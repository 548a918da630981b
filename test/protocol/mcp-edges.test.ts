/**
 * MCP `tools/call` requests whose params do not have the shape MCP gives them (src/mcp/mcp-server.ts,
 * `toolCallProblem`): `arguments` that is no object, a `name` that is no string. Each is answered
 * -32602 (invalid params) with one sentence saying what is wrong, not -32603 with the schema
 * library's dump of its issues; the MCP connection goes on serving. Against a real server, with
 * the official SDK client.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CallToolResultSchema, ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { startServer } from '../support/harness.ts';
import { call, mcpClient, textOf } from '../mcp/helpers.ts';

const TOKEN = 'mcp-edges-token';

test('tools/call with arguments that are no object, or no tool name: -32602 in one sentence', async (t) => {
  const server = await startServer({ flags: ['--token', TOKEN] });
  t.after(() => server.close());
  const { client } = await mcpClient(t, server.httpUrl, { token: TOKEN });
  const bad: Array<[unknown, RegExp]> = [
    [{ name: 'exec_command', arguments: 'echo hi' }, /arguments must be an object .* not a string$/],
    [{ name: 'exec_command', arguments: ['echo hi'] }, /arguments must be an object .* not an array$/],
    [{ name: 'exec_command', arguments: 5 }, /arguments must be an object .* not a number$/],
    [{ name: 'exec_command', arguments: null }, /arguments must be an object .* not null$/],
    [{ name: 7, arguments: {} }, /params\.name must be the tool's name \(a string\), not a number$/],
  ];
  for (const [params, why] of bad) {
    await assert.rejects(
      client.request({ method: 'tools/call', params: params as never }, CallToolResultSchema),
      (e: unknown) => {
        assert.ok(e instanceof McpError, String(e));
        assert.equal(e.code, ErrorCode.InvalidParams, e.message);
        assert.match(e.message, why);
        assert.doesNotMatch(e.message, /invalid_type|expected|\n/, 'no dump of the schema library');
        return true;
      },
      JSON.stringify(params),
    );
  }
  // The connection still serves its well-formed calls.
  const ok = await call(client, 'exec_command', { cmd: 'echo still-here' });
  assert.match(textOf(ok), /still-here/);
  const listed = await client.request(
    { method: 'tools/call', params: { name: 'list_dir', arguments: { path: '.' } } },
    CallToolResultSchema,
  );
  assert.notEqual(listed.isError, true, textOf(listed));
});
