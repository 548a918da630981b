/**
 * File routes, `fs/*` and MCP file tools on bad input: a huge offset is a 400, errors name the
 * path the session asked for (never the host path of its private /tmp), and the client's own
 * mistakes (ENOTDIR, EEXIST, EISDIR, ELOOP, ENAMETOOLONG, a directory without `recursive`,
 * copying onto or into itself) are 4xx, not 500.
 */
import assert from 'node:assert/strict';
import { symlink } from 'node:fs/promises';
import { test } from 'node:test';
import { RpcError } from '../../src/client/rpc-connection.ts';
import type { SessionInfo } from '../../src/protocol/index.ts';
import { b64, sessionFor } from '../support/harness.ts';
import { call, mcpClient } from '../mcp/helpers.ts';
import { newSession, serverWithApi, type Answer, type Api } from './helpers.ts';

/** A session made over REST, its workdir, and helpers for its file routes. */
async function filesOf(api: Api) {
  const id = await newSession(api);
  const info = await api<SessionInfo>('GET', `/v1/sessions/${id}`);
  const workdir = info.body.workdir;
  const base = `/v1/sessions/${id}/files`;
  const q = (path: string) => `path=${encodeURIComponent(path)}`;
  const upload = async (path: string, data: string): Promise<Answer> => {
    const res = await fetch(`${api.server.httpUrl}${base}/content?${q(path)}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/octet-stream' },
      body: data,
    });
    return { status: res.status, body: await res.json(), headers: res.headers };
  };
  return {
    id,
    workdir,
    get: (route: string, path: string, extra = '') => api('GET', `${base}/${route}?${q(path)}${extra}`),
    post: (route: string, body: unknown) => api('POST', `${base}/${route}`, body),
    upload,
  };
}

/** Asserts status and code, and that the message matches `message`. */
function assertError(r: Answer, status: number, code: string, message: RegExp | string, what: string): void {
  assert.equal(r.status, status, `${what}: ${JSON.stringify(r.body)}`);
  assert.equal(r.body.code, code, what);
  if (typeof message === 'string') assert.equal(r.body.message, message, what);
  else assert.match(String(r.body.message), message, what);
}

test('download and MCP read_file: an offset past 2^53-1 is 400 invalid params; the largest one reads nothing', async (t) => {
  const api = await serverWithApi(t);
  const f = await filesOf(api);
  assert.equal((await f.upload(`${f.workdir}/a.txt`, 'hello')).status, 200);
  for (const offset of ['99999999999999999999', '9007199254740992']) {
    const r = await f.get('content', `${f.workdir}/a.txt`, `&offset=${offset}`);
    assertError(r, 400, 'EXEC_ERR_INVALID_PARAMS', /offset/, `offset ${offset}`);
  }
  const last = await f.get('content', `${f.workdir}/a.txt`, `&offset=${Number.MAX_SAFE_INTEGER}`);
  assert.equal(last.status, 200);
  assert.equal(last.body, undefined);

  const { client } = await mcpClient(t, api.server.httpUrl);
  for (const offset of [1e20, Number.MAX_SAFE_INTEGER + 1]) {
    const r = await call(client, 'read_file', { path: 'a.txt', offset, session: f.id });
    assert.equal(r.isError, true, JSON.stringify(r));
    assert.equal(r.structuredContent?.['code'], 'EXEC_ERR_INVALID_PARAMS');
    assert.match(String(r.structuredContent?.['message']), /offset/);
  }
  const ok = await call(client, 'read_file', { path: 'a.txt', offset: 1, session: f.id });
  assert.equal(ok.structuredContent?.['bytes'], 4);
});

test('errors on /tmp paths name the session path, not the host path of the private /tmp', async (t) => {
  const api = await serverWithApi(t);
  const f = await filesOf(api);
  const root = api.server.config.workspaceRoot;
  const missing = '/tmp/nope: No such file or directory';
  const cases: Array<[string, Answer]> = [
    ['metadata', await f.get('metadata', '/tmp/nope')],
    ['list', await f.get('list', '/tmp/nope')],
    ['download', await f.get('content', '/tmp/nope')],
    ['upload', await f.upload('/tmp/nope/x', 'x')],
    ['mkdir', await f.post('mkdir', { path: '/tmp/nope' + '/y' })],
  ];
  for (const [what, r] of cases) {
    assertError(
      r,
      404,
      'EXEC_ERR_NOT_FOUND',
      what === 'mkdir' ? '/tmp/nope/y: No such file or directory' : missing,
      what,
    );
    assert.ok(!String(r.body.message).includes(root), `${what}: ${r.body.message}`);
  }
  // A file through a file under /tmp: the message names /tmp too.
  assert.equal((await f.upload('/tmp/file', 'x')).status, 200);
  assertError(await f.get('list', '/tmp/file'), 400, 'EXEC_ERR_INVALID_REQUEST', '/tmp/file: Not a directory', 'list');

  const s = await sessionFor(t, api.server.url, { resumeSessionId: f.id });
  await assert.rejects(s.request('fs/getMetadata', { path: '/tmp/nope/x' }), (err: unknown) => {
    assert.ok(err instanceof RpcError);
    assert.equal(err.data?.['reason'], '/tmp/nope/x: No such file or directory');
    return true;
  });
  const { client } = await mcpClient(t, api.server.httpUrl);
  const r = await call(client, 'read_file', { path: '/tmp/nope', session: f.id });
  assert.equal(r.structuredContent?.['message'], missing);
});

test('HTTP file routes: ENOTDIR, EEXIST, ENAMETOOLONG and copies onto or into themselves are 4xx', async (t) => {
  const api = await serverWithApi(t);
  const f = await filesOf(api);
  const w = f.workdir;
  const long = `${w}/${'x'.repeat(300)}`;
  assert.equal((await f.upload(`${w}/a.txt`, 'hello')).status, 200);
  assert.equal((await f.post('mkdir', { path: `${w}/d` })).status, 200);
  const notDir = /a\.txt(\/x)?: Not a directory$/;
  assertError(await f.get('list', `${w}/a.txt`), 400, 'EXEC_ERR_INVALID_REQUEST', notDir, 'list a file');
  assertError(await f.upload(`${w}/a.txt/x`, 'x'), 400, 'EXEC_ERR_INVALID_REQUEST', notDir, 'upload through a file');
  assertError(await f.post('mkdir', { path: w }), 400, 'EXEC_ERR_INVALID_REQUEST', `${w}: File exists`, 'mkdir');
  for (const [what, r] of [
    ['mkdir', await f.post('mkdir', { path: long })],
    ['upload', await f.upload(long, 'x')],
    ['metadata', await f.get('metadata', long)],
  ] as const)
    assertError(r, 400, 'EXEC_ERR_INVALID_PARAMS', /: File name too long$/, `${what} of a long name`);
  const copy = (sourcePath: string, destinationPath: string, recursive = false) =>
    f.post('copy', { sourcePath, destinationPath, recursive });
  assertError(await copy(w, `${w}/sub`, true), 400, 'EXEC_ERR_INVALID_REQUEST', /into itself/, 'dir into itself');
  assertError(
    await copy(`${w}/a.txt`, `${w}/a.txt`),
    400,
    'EXEC_ERR_INVALID_REQUEST',
    /onto itself/,
    'file onto itself',
  );
  assertError(await copy(`${w}/a.txt`, `${w}/d`), 400, 'EXEC_ERR_INVALID_REQUEST', /directory/, 'file onto a dir');
  // The file is intact and an ordinary copy still works.
  assert.equal((await copy(`${w}/a.txt`, `${w}/b.txt`)).status, 200);
  assert.equal((await f.get('content', `${w}/b.txt`)).body, 'hello');
});

test('fs/*: listing a file, mkdir of an existing path and a copy onto itself are -32600 with data.errno', async (t) => {
  const api = await serverWithApi(t);
  const s = await sessionFor(t, api.server.url);
  const w = (await s.request<{ workdir: string }>('session/info', {})).workdir;
  await s.request('fs/writeFile', { path: `${w}/a.txt`, dataBase64: b64('hello') });
  const refused = async (method: string, params: unknown, rpcCode: number, errno?: string) =>
    assert.rejects(s.request(method, params), (err: unknown) => {
      assert.ok(err instanceof RpcError, String(err));
      assert.equal(err.rpcCode, rpcCode, `${method}: ${err.message}`);
      assert.equal(err.code, rpcCode === -32602 ? 'EXEC_ERR_INVALID_PARAMS' : 'EXEC_ERR_INVALID_REQUEST');
      if (errno !== undefined) assert.equal(err.data?.['errno'], errno);
      return true;
    });
  await refused('fs/readDirectory', { path: `${w}/a.txt` }, -32600, 'ENOTDIR');
  await refused('fs/createDirectory', { path: w }, -32600, 'EEXIST');
  await refused('fs/createDirectory', { path: `${w}/${'y'.repeat(300)}` }, -32602, 'ENAMETOOLONG');
  await refused('fs/copy', { sourcePath: `${w}/a.txt`, destinationPath: `${w}/a.txt`, recursive: false }, -32600);
  assert.deepEqual(await s.request('fs/readFile', { path: `${w}/a.txt` }), { dataBase64: b64('hello') });
});

test('a directory without recursive, a directory copy onto an existing path, EISDIR and ELOOP are 400 with data.errno', async (t) => {
  const api = await serverWithApi(t);
  const f = await filesOf(api);
  const w = f.workdir;
  assert.equal((await f.post('mkdir', { path: `${w}/d` })).status, 200);
  assert.equal((await f.post('mkdir', { path: `${w}/e` })).status, 200);
  const s = await sessionFor(t, api.server.url, { resumeSessionId: f.id });
  // A symlink loop (the file API makes no symlinks; the workspace is a host directory here).
  await symlink('loop-b', `${w}/loop-a`);
  await symlink('loop-a', `${w}/loop-b`);
  const http = async (what: string, r: Promise<Answer>, message: RegExp) =>
    assertError(await r, 400, 'EXEC_ERR_INVALID_REQUEST', message, what);
  const q = (path: string) => `path=${encodeURIComponent(path)}`;
  await http(
    'remove',
    api('DELETE', `/v1/sessions/${f.id}/files?${q(`${w}/d`)}`),
    /d: Is a directory \(pass recursive\)$/,
  );
  await http('copy', f.post('copy', { sourcePath: `${w}/d`, destinationPath: `${w}/d2` }), /pass recursive/);
  await http(
    'copy onto',
    f.post('copy', { sourcePath: `${w}/d`, destinationPath: `${w}/e`, recursive: true }),
    /already exists/,
  );
  await http('upload', f.upload(`${w}/d`, 'x'), /d: Is a directory$/);
  await http('download', f.get('content', `${w}/loop-a`), /loop-a: Too many levels of symbolic links$/);
  const refused = async (method: string, params: unknown, errno: string, message: RegExp) =>
    assert.rejects(s.request(method, params), (err: unknown) => {
      assert.ok(err instanceof RpcError, String(err));
      assert.deepEqual([err.rpcCode, err.code], [-32600, 'EXEC_ERR_INVALID_REQUEST'], `${method}: ${err.message}`);
      assert.equal(err.data?.['errno'], errno, method);
      assert.match(err.message, message, method);
      return true;
    });
  await refused('fs/remove', { path: `${w}/d` }, 'EISDIR', /pass recursive/);
  await refused(
    'fs/copy',
    { sourcePath: `${w}/d`, destinationPath: `${w}/d2`, recursive: false },
    'EISDIR',
    /pass recursive/,
  );
  await refused(
    'fs/copy',
    { sourcePath: `${w}/d`, destinationPath: `${w}/e`, recursive: true },
    'EEXIST',
    /already exists/,
  );
  await refused('fs/writeFile', { path: `${w}/d`, dataBase64: b64('x') }, 'EISDIR', /d: Is a directory$/);
  await refused('fs/readFile', { path: `${w}/loop-a` }, 'ELOOP', /symbolic links$/);
  await refused('fs/getMetadata', { path: `${w}/loop-b` }, 'ELOOP', /symbolic links$/);
  // Nothing was removed or written.
  assert.equal((await f.get('metadata', `${w}/d`)).status, 200);
  assert.equal((await f.get('list', `${w}/d2`)).status, 404);
});
