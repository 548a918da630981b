/**
 * The MCP endpoint with the official SDK client, on both backends: listing, commands continued
 * with write_stdin, files, a sandbox denial and an approval as the model reads them, tenants.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ExecToolResult, SessionInfo } from '../../src/protocol/index.ts';
import { dockerTestOptions } from '../docker/engine.ts';
import { BACKENDS } from '../support/backends.ts';
import type { BackendKind, TestServer } from '../support/harness.ts';

// Loaded once the engine check above is done: evaluating the server's modules takes seconds,
// which must not run while that check waits for the engine's answer.
const { startServer } = await import('../support/harness.ts');
const { TEXT_RE } = await import('../http/helpers.ts');
const { call, mcpClient, textOf } = await import('./helpers.ts');

const EXPECTED_TOOLS = [
  'create_session',
  'decide_approval',
  'exec_command',
  'expose_port',
  'fork_session',
  'list_dir',
  'list_sessions',
  'read_file',
  'snapshot_session',
  'write_file',
  'write_stdin',
];

async function server(
  t: { after(fn: () => Promise<void>): void },
  backend: BackendKind,
  flags: string[] = [],
): Promise<TestServer> {
  const s = await startServer({ backend, flags });
  t.after(() => s.close());
  return s;
}

for (const backend of BACKENDS) {
  const options = backend === 'docker' ? dockerTestOptions : { timeout: 60_000 };

  test(
    `mcp (${backend}): tools are listed with JSON Schemas; a command runs and is continued with write_stdin`,
    options,
    async (t) => {
      const s = await server(t, backend);
      const { client } = await mcpClient(t, s.httpUrl);
      const { tools } = await client.listTools();
      assert.deepEqual(tools.map((x) => x.name).sort(), EXPECTED_TOOLS);
      const exec = tools.find((x) => x.name === 'exec_command');
      assert.equal(exec?.inputSchema.type, 'object');
      assert.deepEqual(exec?.inputSchema.required, ['cmd']);
      assert.ok(exec?.inputSchema.properties?.['session'], 'exec_command takes a session argument');

      const r = await call(client, 'exec_command', { cmd: 'echo hello; exit 3', login: false, shell: '/bin/sh' });
      assert.equal(r.isError, undefined, textOf(r));
      const m = TEXT_RE.exec(textOf(r));
      assert.ok(m, textOf(r));
      assert.equal(m[3], '3');
      assert.equal(m[6], 'hello\n');
      assert.equal(r.structuredContent?.['exit_code'], 3);

      // A session was created implicitly and bound: it is listed as such.
      const listed = await call<{ sessions: SessionInfo[] }>(client, 'list_sessions');
      assert.equal(listed.structuredContent?.sessions?.length, 1);
      assert.match(textOf(listed), /\(bound\)/);

      const started = await call(client, 'exec_command', {
        cmd: 'read line; echo "got $line"',
        tty: true,
        login: false,
        shell: '/bin/sh',
        yield_time_ms: 500,
      });
      const id = started.structuredContent?.['session_id'];
      assert.ok(Number.isInteger(id), textOf(started));
      assert.match(textOf(started), new RegExp(`Process running with session ID ${id}`));
      const answered = await call<ExecToolResult>(client, 'write_stdin', {
        session_id: id,
        chars: 'there\n',
        yield_time_ms: 2000,
      });
      assert.match(answered.structuredContent?.output ?? '', /got there/);
      const done =
        answered.structuredContent?.['exit_code'] ??
        (await call(client, 'write_stdin', { session_id: id, chars: '' })).structuredContent?.['exit_code'];
      assert.equal(done, 0);

      // Bad arguments are tool errors the model can read, not protocol failures.
      const bad = await call(client, 'exec_command', { command: 'ls' });
      assert.equal(bad.isError, true);
      assert.match(textOf(bad), /missing field cmd|unknown field command/);
      await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), /unknown tool/);
    },
  );

  test(`mcp (${backend}): write_file, read_file and list_dir work on the session's workspace`, options, async (t) => {
    const s = await server(t, backend);
    const { client } = await mcpClient(t, s.httpUrl);
    const w = await call(client, 'write_file', { path: 'notes/hello.txt', content: 'héllo\nworld\n' });
    assert.equal(w.isError, undefined, textOf(w));
    const seen = await call(client, 'exec_command', { cmd: 'cat notes/hello.txt', login: false, shell: '/bin/sh' });
    assert.equal(seen.structuredContent?.['output'], 'héllo\nworld\n');
    const r = await call(client, 'read_file', { path: 'notes/hello.txt' });
    assert.equal(textOf(r), 'héllo\nworld\n');
    assert.equal(r.structuredContent?.['encoding'], 'utf8');
    // A partial read says where to go on; a multi-byte character is never cut.
    const part = await call(client, 'read_file', { path: 'notes/hello.txt', max_bytes: 2 });
    assert.match(textOf(part), /^h\n\[12 more bytes: read on with "offset": 1\]$/);
    const rest = await call(client, 'read_file', { path: 'notes/hello.txt', offset: 1 });
    assert.equal(textOf(rest), 'éllo\nworld\n');
    const bin = await call(client, 'write_file', {
      path: 'blob.bin',
      content: Buffer.from([0, 1, 2, 255]).toString('base64'),
      encoding: 'base64',
    });
    assert.equal(bin.isError, undefined, textOf(bin));
    const rb = await call(client, 'read_file', { path: 'blob.bin' });
    assert.equal(rb.structuredContent?.['encoding'], 'base64');
    assert.match(textOf(rb), /\nAAEC\/w==$/);
    const ls = await call(client, 'list_dir', {});
    assert.match(textOf(ls), /\nblob\.bin\nnotes\/$/);
    const missing = await call(client, 'read_file', { path: 'nope.txt' });
    assert.equal(missing.isError, true);
    assert.match(textOf(missing), /EXEC_ERR_NOT_FOUND/);
  });

  test(`mcp (${backend}): a sandbox denial and an approval read as the model sees them`, options, async (t) => {
    const s = await server(t, backend);
    const { client } = await mcpClient(t, s.httpUrl);
    // Default policy (workspace-write, on-request): writing outside the writable roots is denied.
    const denied = await call(client, 'exec_command', {
      cmd: 'echo x > /etc/mcp-denied-test',
      login: false,
      shell: '/bin/sh',
    });
    assert.equal(denied.structuredContent?.['sandbox_denied'], true, textOf(denied));
    assert.match(textOf(denied), /The sandbox denied this command/);
    assert.match(textOf(denied), /require_escalated/);
    const denyWrite = await call(client, 'write_file', { path: '/etc/mcp-denied-test', content: 'x' });
    assert.equal(denyWrite.isError, true);
    assert.match(textOf(denyWrite), /EXEC_ERR_FS_DENIED/);

    // Under `untrusted` every command needs approval: the result says how to give it.
    const created = await call(client, 'create_session', { approvalPolicy: 'untrusted' });
    assert.equal(created.isError, undefined, textOf(created));
    const asked = await call(client, 'exec_command', { cmd: 'echo approved-run', login: false, shell: '/bin/sh' });
    assert.equal(asked.structuredContent?.['status'], 'approval_required', textOf(asked));
    const approvalId = asked.structuredContent?.['approval_id'];
    assert.match(
      textOf(asked),
      new RegExp(`call decide_approval with \\{"approval_id": "${approvalId}", "decision": "approved"\\}`),
    );
    const ran = await call(client, 'decide_approval', { approval_id: approvalId, decision: 'approved' });
    assert.equal(ran.structuredContent?.['exit_code'], 0, textOf(ran));
    assert.equal(ran.structuredContent?.['output'], 'approved-run\n');
    // A denied approval runs nothing and says so.
    const again = await call(client, 'exec_command', { cmd: 'echo never', login: false, shell: '/bin/sh' });
    const refused = await call(client, 'decide_approval', {
      approval_id: again.structuredContent?.['approval_id'],
      decision: 'denied',
    });
    assert.equal(refused.isError, true);
    assert.match(textOf(refused), /rejected.*EXEC_ERR_REJECTED/);
  });

  test(
    `mcp (${backend}): tokens and tenants: no token is refused, and another tenant sees neither the MCP session nor the exec session`,
    options,
    async (t) => {
      const s = await server(t, backend, ['--tokens', 'alice:alice-token,bob:bob-token']);
      const noToken = await fetch(`${s.httpUrl}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'initialize',
          params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } },
        }),
      });
      assert.equal(noToken.status, 401);

      const alice = await mcpClient(t, s.httpUrl, { token: 'alice-token' });
      const made = await call(alice.client, 'create_session', {});
      const aliceSession = made.structuredContent?.['sessionId'];
      assert.ok(typeof aliceSession === 'string', String(aliceSession));

      // Bob presenting Alice's MCP session id: not found.
      const hijack = await fetch(`${s.httpUrl}/mcp`, {
        method: 'POST',
        headers: {
          authorization: 'Bearer bob-token',
          'mcp-session-id': alice.transport.sessionId ?? '',
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': '2025-06-18',
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 7,
          method: 'tools/call',
          params: { name: 'list_sessions', arguments: {} },
        }),
      });
      assert.equal(hijack.status, 404);

      // Bob's own connection: Alice's exec session does not exist for him, by argument or header.
      const bob = await mcpClient(t, s.httpUrl, { token: 'bob-token' });
      const listed = await call<{ sessions: SessionInfo[] }>(bob.client, 'list_sessions');
      assert.equal(listed.structuredContent?.sessions?.length, 0);
      const named = await call(bob.client, 'exec_command', { cmd: 'true', session: aliceSession });
      assert.equal(named.isError, true);
      assert.match(textOf(named), /EXEC_ERR_SESSION_NOT_FOUND/);
      await assert.rejects(
        mcpClient(t, s.httpUrl, { token: 'bob-token', headers: { 'x-exec-session': aliceSession } }),
        /404|not found/i,
      );

      // Alice binds a second connection to her session by header.
      const again = await mcpClient(t, s.httpUrl, {
        token: 'alice-token',
        headers: { 'x-exec-session': aliceSession },
      });
      const bound = await call(again.client, 'list_sessions');
      assert.equal(bound.structuredContent?.['boundSession'], aliceSession);
    },
  );
}

test('mcp: an Origin of another host is refused', async (t) => {
  const s = await server(t, 'local');
  const r = await fetch(`${s.httpUrl}/mcp`, {
    method: 'POST',
    headers: {
      origin: 'http://evil.example',
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    },
    body: '{}',
  });
  assert.equal(r.status, 403);
});

test('mcp: expose_port gives a server started with exec_command a URL a browser can open', {
  timeout: 90_000,
}, async (t) => {
  const s = await server(t, 'local');
  const { client } = await mcpClient(t, s.httpUrl);
  const notAllowed = await call(client, 'expose_port', { port: 8080 });
  assert.equal(notAllowed.isError, true);
  assert.match(textOf(notAllowed), /previewPorts/);

  await call(client, 'create_session', { previewPorts: true });
  await call(client, 'write_file', { path: 'site/index.html', content: 'served to a browser\n' });
  const port = 20_000 + Math.floor(Math.random() * 1000);
  const started = await call(client, 'exec_command', {
    cmd: `exec busybox httpd -f -p 127.0.0.1:${port} -h site`,
    login: false,
    shell: '/bin/sh',
    yield_time_ms: 250,
  });
  assert.ok(Number.isInteger(started.structuredContent?.['session_id']), textOf(started));
  const exposed = await call(client, 'expose_port', { port });
  assert.equal(exposed.isError, undefined, textOf(exposed));
  const url = String(exposed.structuredContent?.['url']);
  assert.ok(url.startsWith(`${s.httpUrl}/v1/sessions/`), url);
  assert.match(textOf(exposed), new RegExp(`port ${port} of session`));
  const first = await fetch(url, { redirect: 'manual' });
  assert.equal(first.status, 302);
  const cookie = (first.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  const deadline = Date.now() + 20_000;
  let page = await fetch(`${s.httpUrl}${first.headers.get('location')}`, { headers: { cookie } });
  while (page.status === 502 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
    page = await fetch(`${s.httpUrl}${first.headers.get('location')}`, { headers: { cookie } });
  }
  assert.equal(page.status, 200);
  assert.equal(await page.text(), 'served to a browser\n');
});
