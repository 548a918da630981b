/**
 * `exec-server mcp --url ...` started as an MCP server command by the SDK's stdio client, as a
 * desktop agent starts it: tools listed and run through the bridge against a real server.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { mcpUrl } from '../../src/cli/mcp.ts';
import type { SessionInfo } from '../../src/protocol/index.ts';
import { requestJson } from '../http/helpers.ts';
import { startServer } from '../support/harness.ts';
import { textOf } from './helpers.ts';

const BIN = fileURLToPath(new URL('../../bin/exec-server.js', import.meta.url));

function bridge(args: string[]): { client: Client; transport: StdioClientTransport; stderr: () => string } {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [BIN, 'mcp', ...args],
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin' },
    stderr: 'pipe',
  });
  let err = '';
  transport.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  return { client: new Client({ name: 'stdio-bridge-test', version: '1.0.0' }), transport, stderr: () => err };
}

test('mcp --url: ws:// and http:// addresses map to /mcp', () => {
  assert.equal(mcpUrl('ws://127.0.0.1:8765').href, 'http://127.0.0.1:8765/mcp');
  assert.equal(mcpUrl('wss://exec.example/').href, 'https://exec.example/mcp');
  assert.equal(mcpUrl('https://exec.example/prefix/mcp').href, 'https://exec.example/prefix/mcp');
  assert.throws(() => mcpUrl('ftp://x'), /unsupported scheme/);
  assert.throws(() => mcpUrl('not a url'), /not a URL/);
});

test('exec-server mcp: an MCP client on stdio lists and runs tools of a running server, with its token', {
  timeout: 90_000,
}, async (t) => {
  const server = await startServer({ flags: ['--token', 'bridge-token'] });
  t.after(() => server.close());
  const { client, transport, stderr } = bridge(['--url', server.url, '--token', 'bridge-token']);
  await client.connect(transport);
  t.after(() => client.close());
  const { tools } = await client.listTools();
  assert.ok(
    tools.some((x) => x.name === 'exec_command'),
    JSON.stringify(tools.map((x) => x.name)),
  );
  const r = await client.callTool({
    name: 'exec_command',
    arguments: { cmd: 'echo through-the-bridge', login: false, shell: '/bin/sh' },
  });
  assert.match(textOf(r), /Process exited with code 0\n[\s\S]*through-the-bridge\n$/, stderr());
  assert.equal(server.app.sessions.size, 1);
  // Closing the client ends the bridge, which ends its MCP connection and the session it made.
  await client.close();
  const deadline = Date.now() + 10_000;
  while (server.app.sessions.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  assert.equal(server.app.sessions.size, 0);
});

test('exec-server mcp: a wrong token is an error the MCP client sees, naming the cause', {
  timeout: 90_000,
}, async (t) => {
  const server = await startServer({ flags: ['--token', 'right'] });
  t.after(() => server.close());
  const { client, transport } = bridge(['--url', server.url, '--token', 'wrong']);
  t.after(() => client.close());
  await assert.rejects(client.connect(transport), /401|token|Unauthorized/i);
});

test('exec-server mcp --session: the bridge works on an existing session', {
  timeout: 90_000,
}, async (t) => {
  const server = await startServer({ flags: ['--token', 'bridge-token'] });
  t.after(() => server.close());
  const made = await requestJson<SessionInfo>(`${server.httpUrl}/v1/sessions`, 'POST', {}, 'bridge-token');
  const id = made.body.sessionId;
  const { client, transport, stderr } = bridge(['--url', server.url, '--token', 'bridge-token', '--session', id]);
  await client.connect(transport);
  t.after(() => client.close());
  const listed = await client.callTool({ name: 'list_sessions', arguments: {} });
  assert.equal((listed.structuredContent as { boundSession?: string }).boundSession, id, stderr());
  const r = await client.callTool({ name: 'exec_command', arguments: { cmd: 'pwd', login: false, shell: '/bin/sh' } });
  assert.equal((r.structuredContent as { output?: string }).output, `${made.body.workdir}\n`);
});

test('exec-server mcp: bad arguments are usage errors (exit 2), not a started bridge', {
  timeout: 120_000,
}, async () => {
  for (const [args, message] of [
    [['--bogus'], /Unknown option '--bogus'/],
    [['ws://127.0.0.1:8765'], /unexpected argument "ws:\/\/127\.0\.0\.1:8765"; the server is given with --url/],
    [['--url', 'ftp://x'], /unsupported scheme ftp:/],
    [['--session'], /argument missing/],
  ] as const) {
    const r = spawnSync(process.execPath, [BIN, 'mcp', ...args], { input: '', encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
    assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  }
});
