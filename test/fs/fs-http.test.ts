/** Files over HTTP (`/v1/sessions/:id/files...`), the client SDK and `exec-server cp`, on both backends. */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { cpCommand } from '../../src/cli/cp.ts';
import { ExecServerHttpError } from '../../src/client/errors.ts';
import {
  HttpFiles,
  readFile as rpcReadFile,
  readFileChunked,
  writeFile as rpcWriteFile,
  writeFileChunked,
} from '../../src/client/files.ts';
import { BACKENDS, fsEnv } from './helpers.ts';

async function rejectsHttp(p: Promise<unknown>, status: number, code: string, message?: RegExp): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof ExecServerHttpError, String(err));
    assert.equal(err.status, status, err.message);
    assert.equal(err.code, code, err.message);
    if (message) assert.match(err.message, message);
    return true;
  });
}

/** A raw request, for what the SDK never sends (wrong content type, no token). */
function raw(
  url: string,
  method: string,
  headers: Record<string, string>,
  body?: Buffer,
): Promise<{ status: number; body: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers }, async (res) => {
      const chunks: Buffer[] = [];
      for await (const c of res) chunks.push(c as Buffer);
      const text = Buffer.concat(chunks).toString('utf8');
      resolve({ status: res.statusCode ?? 0, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} });
    });
    req.on('error', reject);
    req.end(body);
  });
}

for (const { kind, options } of BACKENDS) {
  test(`${kind}: HTTP file routes and the SDK`, options, async (t) => {
    const env = await fsEnv(t, kind, {
      flags: ['--tokens', 'alice:tok-a,bob:tok-b'],
      token: 'tok-a',
      session: ({ workdir }) => ({ denyRead: [`${workdir}/secret`] }),
    });
    const alice = env.session;
    const workdir = env.workdir;
    const files = new HttpFiles({ baseUrl: env.server.url, token: 'tok-a', sessionId: alice.sessionId });

    await files.mkdir(`${workdir}/d/e`, { recursive: true });
    assert.deepEqual(await files.upload(`${workdir}/d/a.txt`, Buffer.from('hello http')), {
      path: `${workdir}/d/a.txt`,
      bytesWritten: 10,
    });
    await files.upload(`file://${workdir}/d/empty`, Buffer.alloc(0));
    const chunks: Buffer[] = [];
    const { stream, size } = await files.downloadStream(`${workdir}/d/a.txt`);
    for await (const c of stream) chunks.push(c as Buffer);
    assert.equal(Buffer.concat(chunks).toString(), 'hello http');
    assert.equal(size, 10);
    const tail = await files.downloadStream(`${workdir}/d/a.txt`, 6);
    const tailChunks: Buffer[] = [];
    for await (const c of tail.stream) tailChunks.push(c as Buffer);
    assert.equal(Buffer.concat(tailChunks).toString(), 'http');
    const meta = await files.stat(`${workdir}/d/a.txt`);
    assert.equal(meta.isFile, true);
    assert.equal(meta.size, 10);
    assert.deepEqual((await files.list(`${workdir}/d`)).map((e) => e.fileName).sort(), ['a.txt', 'e', 'empty']);
    assert.equal(await files.canonicalize(`${workdir}/d/e/../a.txt`), `${workdir}/d/a.txt`);
    await files.copy(`${workdir}/d`, `${workdir}/d2`, { recursive: true });
    assert.equal((await files.stat(`${workdir}/d2/a.txt`)).size, 10);
    await files.remove(`${workdir}/d2`, { recursive: true });
    await rejectsHttp(files.stat(`${workdir}/d2`), 404, 'EXEC_ERR_NOT_FOUND', /No such file or directory/);
    await files.remove(`${workdir}/d2`, { recursive: true, force: true });

    // Errors, as JSON {code, message}.
    await rejectsHttp(files.remove(`${workdir}/d`), 400, 'EXEC_ERR_INVALID_REQUEST', /Is a directory/);
    await rejectsHttp(files.downloadStream(`${workdir}/d`), 400, 'EXEC_ERR_INVALID_REQUEST', /Is a directory/);
    await rejectsHttp(files.downloadStream(`${workdir}/missing`), 404, 'EXEC_ERR_NOT_FOUND');
    await rejectsHttp(files.upload(`${workdir}/no/such/file`, Buffer.from('x')), 404, 'EXEC_ERR_NOT_FOUND');
    await rejectsHttp(files.stat('relative/path'), 400, 'EXEC_ERR_INVALID_PARAMS');
    await rejectsHttp(files.mkdir(`${workdir}/no/parent`), 404, 'EXEC_ERR_NOT_FOUND');
    await env.sh(`mkdir -p ${workdir}/secret && printf s > ${workdir}/secret/s.txt`);
    await rejectsHttp(files.downloadStream(`${workdir}/secret/s.txt`), 403, 'EXEC_ERR_FS_DENIED', /deny-read/);
    await rejectsHttp(files.list(`${workdir}/secret`), 403, 'EXEC_ERR_FS_DENIED');
    await rejectsHttp(files.copy(workdir, '/tmp/all', { recursive: true }), 403, 'EXEC_ERR_FS_DENIED');
    await rejectsHttp(
      files.upload('/etc/evil', Buffer.from('x')),
      403,
      'EXEC_ERR_FS_DENIED',
      /outside the writable roots/,
    );
    // Another tenant's session does not exist for bob; no token is 401.
    const bob = new HttpFiles({ baseUrl: env.server.httpUrl, token: 'tok-b', sessionId: alice.sessionId });
    await rejectsHttp(bob.stat(`${workdir}/d/a.txt`), 404, 'EXEC_ERR_SESSION_NOT_FOUND');
    await rejectsHttp(
      new HttpFiles({ baseUrl: env.server.httpUrl, sessionId: alice.sessionId }).stat(`${workdir}/d/a.txt`),
      401,
      'EXEC_ERR_UNAUTHORIZED',
    );
    await rejectsHttp(
      new HttpFiles({ baseUrl: env.server.httpUrl, token: 'tok-a', sessionId: 'nope' }).stat('/x'),
      404,
      'EXEC_ERR_SESSION_NOT_FOUND',
    );
    // An upload must say application/octet-stream.
    const url = `${env.server.httpUrl}/v1/sessions/${alice.sessionId}/files/content?path=${encodeURIComponent(`${workdir}/x`)}`;
    const wrongType = await raw(
      url,
      'PUT',
      { authorization: 'Bearer tok-a', 'content-type': 'text/plain' },
      Buffer.from('x'),
    );
    assert.equal(wrongType.status, 400);
    assert.equal(wrongType.body['code'], 'EXEC_ERR_INVALID_REQUEST');
    assert.match(String(wrongType.body['message']), /application\/octet-stream/);

    // The SDK over JSON-RPC, same session.
    await rpcWriteFile(alice.conn, `${workdir}/rpc.txt`, 'via rpc');
    assert.equal((await rpcReadFile(alice.conn, `${workdir}/rpc.txt`)).toString(), 'via rpc');
    const big = randomBytes(5 * 1024 * 1024 + 3);
    assert.equal(await writeFileChunked(alice.conn, `${workdir}/big.bin`, big, 1024 * 1024), big.length);
    const back: Buffer[] = [];
    for await (const c of readFileChunked(alice.conn, `${workdir}/big.bin`, 1024 * 1024)) back.push(c);
    assert.ok(Buffer.concat(back).equals(big));
    // The OpenAPI document lists the routes.
    const doc = await env.server.app
      .inject({ method: 'GET', url: '/documentation/json', headers: { authorization: 'Bearer tok-a' } })
      .catch(() => undefined);
    if (doc && doc.statusCode === 200) assert.match(doc.body, /files\/content/);
    assert.match(JSON.stringify(env.server.app.swagger()), /\/v1\/sessions\/\{id\}\/files\/content/);
  });

  test(`${kind}: exec-server cp copies both ways`, options, async (t) => {
    const e2 = await fsEnvWithToken(t, kind);
    /** `exec-server cp` against this server, with its token. */
    const cp = (args: string[]): Promise<number> => cpCommand(['--url', e2.url, '--token', 'tok', ...args]);
    const dir = await mkdtemp(join(tmpdir(), 'cp-local-'));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const data = randomBytes(300_000);
    await writeFile(join(dir, 'up.bin'), data);
    assert.equal(await cp([join(dir, 'up.bin'), `${e2.sessionId}:${e2.workdir}/`]), 0);
    assert.equal(await cp([`${e2.sessionId}:${e2.workdir}/up.bin`, join(dir, 'down.bin')]), 0);
    assert.ok((await readFile(join(dir, 'down.bin'))).equals(data));
    // Into a directory keeps the name; a file:// remote works.
    await mkdtemp(join(dir, 'sub-'));
    assert.equal(
      await cpCommand([
        '--url',
        e2.url.replace('ws://', 'http://'),
        '--token',
        'tok',
        `${e2.sessionId}:file://${e2.workdir}/up.bin`,
        dir,
      ]),
      0,
    );
    assert.ok((await readFile(join(dir, 'up.bin'))).equals(data));
    // Failures: missing remote (no partial file left), bad usage, wrong token.
    assert.equal(await cp([`${e2.sessionId}:${e2.workdir}/missing`, join(dir, 'missing.bin')]), 1);
    await assert.rejects(stat(join(dir, 'missing.bin')));
    assert.equal(await cp([join(dir, 'a'), join(dir, 'b')]), 2);
    assert.equal(await cpCommand(['--url', e2.url]), 2);
    assert.equal(
      await cpCommand(['--url', e2.url, '--token', 'wrong', join(dir, 'up.bin'), `${e2.sessionId}:${e2.workdir}/x`]),
      1,
    );
  });
}

/** A server with `--token tok` and one session opened with it. */
async function fsEnvWithToken(
  t: Parameters<typeof fsEnv>[0],
  kind: 'local' | 'docker',
): Promise<{ url: string; sessionId: string; workdir: string }> {
  const env = await fsEnv(t, kind, { flags: ['--token', 'tok'], token: 'tok' });
  return { url: env.server.url, sessionId: env.session.sessionId, workdir: env.workdir };
}
