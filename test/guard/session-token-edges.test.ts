/**
 * Session tokens at their edges, against a real server (local backend): a read token cannot
 * touch the owner's file handles nor lend a directory to the session; an expired token's open
 * connection is closed at expiry; a revocation names a token of that session; the WebSocket's
 * refusals are audited like HTTP's; only the canonical MAC verifies.
 */
import assert from 'node:assert/strict';
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { RpcConnection, type RpcError } from '../../src/client/rpc-connection.ts';
import type { SessionToken } from '../../src/protocol/index.ts';
import { newSession, serverWithApi, type Api } from '../http/helpers.ts';

const ACME = 'tenant-secret-acme';
const TOKENS = ['--tokens', `acme:${ACME}`];
const code = (c: string) => (err: RpcError) => err.code === c;

async function mint(api: Api, id: string, body: Record<string, unknown> = {}): Promise<SessionToken> {
  const r = await api<SessionToken>('POST', `/v1/sessions/${id}/tokens`, body, ACME);
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body;
}

async function attach(t: TestContext, api: Api, token: string, id: string): Promise<RpcConnection> {
  const conn = await RpcConnection.open(api.server.url, { token });
  t.after(() => conn.close());
  await conn.request('initialize', { clientName: 't', resumeSessionId: id });
  conn.notify('initialized', {});
  return conn;
}

/** Runs `script` through `conn`; resolves with its output once it exited. */
async function run(conn: RpcConnection, processId: string, script: string): Promise<string> {
  await conn.request('process/start', { processId, argv: ['sh', '-c', script] });
  let out = '';
  for (let after = 0; ; ) {
    const r = await conn.request<{ chunks: Array<{ seq: number; chunk: string }>; exited: boolean }>('process/read', {
      processId,
      afterSeq: after,
      waitMs: 5000,
    });
    for (const c of r.chunks) {
      out += Buffer.from(c.chunk, 'base64').toString();
      after = c.seq;
    }
    if (r.exited) return out;
  }
}

test("a read token cannot close the owner's file handle", async (t) => {
  const api = await serverWithApi(t, { flags: TOKENS });
  const id = await newSession(api, {}, ACME);
  const workdir = (await api<{ workdir: string }>('GET', `/v1/sessions/${id}`, undefined, ACME)).body.workdir;
  const owner = await attach(t, api, ACME, id);
  const { handleId } = await owner.request<{ handleId: string }>('fs/openWrite', { path: `${workdir}/up.bin` });
  await owner.request('fs/writeBlock', { handleId, chunk: Buffer.from('first ').toString('base64') });
  const viewer = await attach(t, api, (await mint(api, id, { access: 'read' })).token, id);
  await assert.rejects(viewer.request('fs/close', { handleId }), code('EXEC_ERR_INVALID_REQUEST'));
  await assert.rejects(
    viewer.request('fs/readBlock', { handleId, offset: 0, len: 4 }),
    code('EXEC_ERR_INVALID_REQUEST'),
  );
  await owner.request('fs/writeBlock', { handleId, chunk: Buffer.from('second').toString('base64') });
  const closed = await owner.request<{ bytesWritten: number }>('fs/closeWrite', { handleId });
  assert.equal(closed.bytesWritten, 12);
  assert.equal(await readFile(join(workdir, 'up.bin'), 'utf8'), 'first second');
  // The viewer's own read handle under the same id does not collide with the owner's.
  await owner.request('fs/open', { path: `${workdir}/up.bin`, handleId: 'h' });
  await viewer.request('fs/open', { path: `${workdir}/up.bin`, handleId: 'h' });
  await viewer.request('fs/close', { handleId: 'h' });
  const block = await owner.request<{ chunk: string }>('fs/readBlock', { handleId: 'h', offset: 0, len: 5 });
  assert.equal(Buffer.from(block.chunk, 'base64').toString(), 'first');
});

/** Lending a client directory needs a sandbox that confines writes (root and bubblewrap). */
const confined = process.getuid?.() === 0 || process.env['CI'] === 'true' ? {} : { skip: 'needs root (sandbox)' };

test('a read token cannot lend a host directory to the session (environmentConfig/read)', confined, async (t) => {
  const api = await serverWithApi(t, { flags: TOKENS });
  const id = await newSession(api, { sandbox: { type: 'workspace-write' } }, ACME);
  const dir = join(tmpdir(), `lend-${process.pid}-${Date.now()}`);
  await mkdir(dir, { mode: 0o755 });
  t.after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(join(dir, 'secret.txt'), 'root only\n', { mode: 0o600 });
  const owner = await attach(t, api, ACME, id);
  const viewer = await attach(t, api, (await mint(api, id, { access: 'read' })).token, id);
  const answer = await viewer.request<{ userHomeDir: string }>('environmentConfig/read', { cwd: dir });
  assert.ok(answer.userHomeDir, 'the viewer still gets the configuration');
  const script = `{ echo pwned > ${dir}/pwned; cat ${dir}/secret.txt; } 2>/dev/null; echo done`;
  assert.equal(await run(owner, 'after-viewer', script), 'done\n', 'the directory was not lent');
  assert.equal((await stat(dir)).uid, 0);
  // The owner's own call does lend it: the check above is not vacuous.
  await owner.request('environmentConfig/read', { cwd: dir });
  assert.match(await run(owner, 'after-owner', script), /root only/);
});

test("an expired token's open connection is closed at expiry, and the refusals are audited", async (t) => {
  const path = join(tmpdir(), `audit-edges-${process.pid}-${Date.now()}.jsonl`);
  t.after(() => rm(path, { force: true }));
  const api = await serverWithApi(t, { flags: [...TOKENS, '--audit-log', path] });
  const id = await newSession(api, {}, ACME);
  const viewer = await attach(t, api, (await mint(api, id, { access: 'read' })).token, id);
  await assert.rejects(
    viewer.request('process/start', { processId: 'x', argv: ['true'] }),
    code('EXEC_ERR_TOKEN_READ_ONLY'),
  );
  // 2 s: expiry is a whole second, so a 1 s token minted late in a second can lapse before attaching.
  const short = await mint(api, id, { ttlSeconds: 2 });
  const conn = await attach(t, api, short.token, id);
  const closed = await new Promise<{ code: number; reason: string }>((resolve) =>
    conn.onClose((c, reason) => resolve({ code: c, reason })),
  );
  assert.equal(closed.code, 4000);
  assert.match(closed.reason, /expired/);
  await api('DELETE', `/v1/sessions/${id}`, undefined, ACME);
  const lines = (await readFile(path, 'utf8'))
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  const denied = lines.filter((l) => l['action'] === 'auth.denied');
  assert.equal(denied.length, 1, JSON.stringify(denied));
  const [refusal] = denied;
  assert.ok(refusal !== undefined);
  assert.equal((refusal['detail'] as Record<string, unknown>)['code'], 'EXEC_ERR_TOKEN_READ_ONLY');
  assert.equal(refusal['session'], id);
});

test('a revocation names a token of that session; only the canonical MAC verifies', async (t) => {
  const api = await serverWithApi(t, { flags: TOKENS });
  const id = await newSession(api, {}, ACME);
  const other = await newSession(api, {}, ACME);
  const tok = await mint(api, id);
  const wrong = await api('DELETE', `/v1/sessions/${other}/tokens/${tok.tokenId}`, undefined, ACME);
  assert.equal(wrong.status, 404);
  assert.equal(wrong.body.code, 'EXEC_ERR_NOT_FOUND');
  const madeUp = await api('DELETE', `/v1/sessions/${id}/tokens/tok_AAAAAAAAAAAAAAAAAAAA`, undefined, ACME);
  assert.equal(madeUp.status, 404);
  assert.equal((await api('GET', `/v1/sessions/${id}`, undefined, tok.token)).status, 200, 'still valid');
  // The 43rd MAC character carries two spare bits: flipping one is another token.
  const last = tok.token.at(-1) ?? '';
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const flipped = `${tok.token.slice(0, -1)}${alphabet[alphabet.indexOf(last) ^ 1]}`;
  const r = await api('GET', `/v1/sessions/${id}`, undefined, flipped);
  assert.equal(r.status, 401);
  assert.equal(r.body.code, 'EXEC_ERR_UNAUTHORIZED');
  assert.equal((await api('DELETE', `/v1/sessions/${id}/tokens/${tok.tokenId}`, undefined, ACME)).status, 204);
  assert.equal((await api('GET', `/v1/sessions/${id}`, undefined, tok.token)).status, 401);
});
