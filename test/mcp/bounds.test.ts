/**
 * /mcp bounds that held in the security review (issue 25, "What held"): a 50 MB request body is
 * refused with 413 before it is parsed or reaches the MCP SDK, on a tokenless server and with a
 * valid token, and the server keeps serving (another MCP initialize works right after).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mcpInitialize } from '../http/helpers.ts';
import { startServer } from '../support/harness.ts';

const TOKEN = 'mcp-bounds-token';

function initialize(base: string, token: string | undefined, pad = ''): Promise<Response> {
  return mcpInitialize(base, { client: 'bounds-test', token, pad });
}

for (const token of [undefined, TOKEN]) {
  test(`mcp (${token === undefined ? 'tokenless' : 'with a token'}): a 50 MB body is refused with 413, the server goes on`, {
    timeout: 60_000,
  }, async (t) => {
    const server = await startServer({ flags: token === undefined ? [] : ['--token', token] });
    t.after(() => server.close());
    const huge = await initialize(server.httpUrl, token, 'x'.repeat(50 * 1024 * 1024));
    assert.equal(huge.status, 413);
    const body = (await huge.json()) as { code?: string };
    assert.equal(body.code, 'EXEC_ERR_TOO_LARGE');
    const ok = await initialize(server.httpUrl, token);
    assert.equal(ok.status, 200, await ok.text());
    assert.ok(ok.headers.get('mcp-session-id'));
  });
}
