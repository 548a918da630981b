/**
 * Malformed `file://` URIs (src/protocol/common.ts `toPath`): wherever a path may be a URI, one
 * that does not parse or whose percent-encoding does not decode is invalid params naming the value
 * (400 / -32602), not an internal error (500 / -32603 "URI malformed").
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RpcConnection, RpcError } from '../../src/client/rpc-connection.ts';
import { sessionFor } from '../support/harness.ts';
import { call, mcpClient } from '../mcp/helpers.ts';
import { newSession, serverWithApi } from './helpers.ts';

/** One of each way a file URI fails: bad percent-escape, truncated UTF-8 escape, unparsable host. */
const BAD_URIS = ['file:///%ZZ', 'file:///%E0%A4%A', 'file://[::1/x'];

/** Asserts an answer is 400 EXEC_ERR_INVALID_PARAMS whose message quotes `uri` (after naming `field`). */
function assertInvalid(r: { status: number; body: unknown }, uri: string, what: string, field?: string): void {
  const body = r.body as { code?: string; message?: string };
  assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
  assert.equal(body.code, 'EXEC_ERR_INVALID_PARAMS', what);
  assert.ok(body.message?.includes(JSON.stringify(uri)), `${what}: ${body.message}`);
  // HTTP bodies are `{code, message}` (docs/errors.md): the field is named in the message.
  if (field !== undefined) assert.ok(body.message?.startsWith(`${field}: `), `${what}: ${body.message}`);
}

/** Asserts a JSON-RPC call was refused with -32602 EXEC_ERR_INVALID_PARAMS quoting `uri` (and naming `field`). */
async function rejectsInvalid(call: Promise<unknown>, uri: string, field?: string): Promise<void> {
  await assert.rejects(call, (err: unknown) => {
    assert.ok(err instanceof RpcError, String(err));
    assert.equal(err.rpcCode, -32602, err.message);
    assert.equal(err.code, 'EXEC_ERR_INVALID_PARAMS');
    assert.ok(err.message.includes(JSON.stringify(uri)), err.message);
    if (field !== undefined) assert.equal(err.data?.['field'], field);
    return true;
  });
}

test('bad file URIs in a REST session spec (workdir, writableRoots, denyRead) answer 400 naming the value', async (t) => {
  const api = await serverWithApi(t);
  for (const uri of BAD_URIS) {
    assertInvalid(await api('POST', '/v1/sessions', { workdir: uri }), uri, `workdir ${uri}`, 'session.workdir');
    assertInvalid(
      await api('POST', '/v1/sessions', { sandbox: { type: 'workspace-write', writableRoots: ['/tmp', uri] } }),
      uri,
      `writableRoots ${uri}`,
      'session.sandbox.writableRoots[1]',
    );
    assertInvalid(
      await api('POST', '/v1/sessions', { denyRead: [uri] }),
      uri,
      `denyRead ${uri}`,
      'session.denyRead[0]',
    );
  }
  // The server still makes sessions.
  assert.match(await newSession(api), /^[0-9a-f-]{36}$/);
});

test('bad file URIs in a WebSocket initialize session spec answer -32602', async (t) => {
  const api = await serverWithApi(t);
  const url = api.server.url;
  for (const uri of BAD_URIS) {
    for (const [session, field] of [
      [{ workdir: uri }, 'session.workdir'],
      [{ denyRead: ['/etc', uri] }, 'session.denyRead[1]'],
    ] as const) {
      const conn = await RpcConnection.open(url);
      t.after(() => conn.close());
      await rejectsInvalid(conn.request('initialize', { clientName: 'bad-input', session }), uri, field);
    }
  }
});

test('bad file URIs as process/start cwd and in its Codex sandbox answer -32602', async (t) => {
  const api = await serverWithApi(t);
  const s = await sessionFor(t, api.server.url);
  const restricted = (path: string) => ({
    permissions: { file_system: { type: 'restricted', entries: [{ access: 'none', path: { type: 'path', path } }] } },
  });
  for (const [i, uri] of BAD_URIS.entries()) {
    await rejectsInvalid(s.start(`cwd${i}`, ['true'], { cwd: uri }), uri, 'cwd');
    await rejectsInvalid(s.start(`roots${i}`, ['true'], { sandbox: { permissions: {}, workspaceRoots: [uri] } }), uri);
    await rejectsInvalid(s.start(`entry${i}`, ['true'], { sandbox: restricted(uri) }), uri);
    // fs/* named the field already; it still does.
    await rejectsInvalid(s.request('fs/getMetadata', { path: uri }), uri, 'path');
  }
  // No process was left behind by the refused starts.
  assert.deepEqual((await s.request<{ processes: unknown[] }>('process/list', {})).processes, []);
});

test('a bad file URI as exec_command workdir answers 400 (HTTP facade) and an MCP error (exec_command, create_session)', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api);
  const { client } = await mcpClient(t, api.server.httpUrl);
  for (const uri of BAD_URIS) {
    assertInvalid(
      await api('POST', `/v1/sessions/${id}/exec_command`, { cmd: 'true', workdir: uri, login: false }),
      uri,
      `exec_command workdir ${uri}`,
      'workdir',
    );
    for (const [tool, args] of [
      ['exec_command', { cmd: 'true', workdir: uri, session: id }],
      ['create_session', { workdir: uri }],
      ['create_session', { denyRead: [uri] }],
    ] as const) {
      const r = await call(client, tool, args);
      assert.equal(r.isError, true, `${tool} ${uri}`);
      assert.equal(r.structuredContent?.['code'], 'EXEC_ERR_INVALID_PARAMS', `${tool} ${uri}`);
      assert.ok(String(r.structuredContent?.['message']).includes(JSON.stringify(uri)), `${tool} ${uri}`);
    }
  }
});
