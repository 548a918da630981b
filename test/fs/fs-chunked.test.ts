/** The fs/readFile size limit, chunked reads and writes, handle limits, and fs/watchMissing. */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { TestSession } from '../support/harness.ts';
import { b64, BACKENDS, fsEnv, rejectsRpc } from './helpers.ts';

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

for (const { kind, options } of BACKENDS) {
  test(`${kind}: fs/readFile larger than the maximum fails clearly; chunked reads serve it`, options, async (t) => {
    const env = await fsEnv(t, kind, { flags: ['--fs-max-read-bytes', '1024'] });
    const { session, workdir } = env;
    const data = randomBytes(5000);
    await session.request('fs/writeFile', { path: `${workdir}/big.bin`, dataBase64: data.toString('base64') });
    await session.request('fs/writeFile', {
      path: `${workdir}/small.bin`,
      dataBase64: data.subarray(0, 1024).toString('base64'),
    });
    assert.equal(
      (await session.request('fs/readFile', { path: `${workdir}/small.bin` }))['dataBase64'],
      data.subarray(0, 1024).toString('base64'),
    );
    await rejectsRpc(
      session.request('fs/readFile', { path: `${workdir}/big.bin` }),
      -32600,
      'EXEC_ERR_TOO_LARGE',
      /1024-byte limit of fs\/readFile; use fs\/open and fs\/readBlock/,
    );

    // Codex's shape: the client names the handle.
    assert.deepEqual(await session.request('fs/open', { handleId: 7, path: `${workdir}/big.bin`, sandbox: null }), {
      handleId: 7,
    });
    const parts: Buffer[] = [];
    let offset = 0;
    for (;;) {
      const block = await session.request<{ chunk: string; eof: boolean }>('fs/readBlock', {
        handleId: 7,
        offset,
        len: 1500,
      });
      const chunk = Buffer.from(block.chunk, 'base64');
      parts.push(chunk);
      offset += chunk.length;
      if (block.eof) break;
      assert.equal(chunk.length, 1500);
    }
    assert.equal(sha(Buffer.concat(parts)), sha(data));
    // Random access: a block in the middle, then past the end.
    const mid = await session.request<{ chunk: string; eof: boolean }>('fs/readBlock', {
      handleId: 7,
      offset: 100,
      len: 10,
    });
    assert.deepEqual(Buffer.from(mid.chunk, 'base64'), data.subarray(100, 110));
    assert.equal(mid.eof, false);
    const past = await session.request<{ chunk: string; eof: boolean }>('fs/readBlock', {
      handleId: 7,
      offset: 10_000,
      len: 10,
    });
    assert.deepEqual(past, { chunk: '', eof: true });
    await rejectsRpc(
      session.request('fs/readBlock', { handleId: 7, offset: 0, len: 64 * 1024 * 1024 }),
      -32600,
      'EXEC_ERR_TOO_LARGE',
      /len/,
    );
    assert.deepEqual(await session.request('fs/close', { handleId: 7 }), {});
    await rejectsRpc(
      session.request('fs/readBlock', { handleId: 7, offset: 0, len: 10 }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /unknown file handle 7/,
    );
    await rejectsRpc(session.request('fs/open', { path: `${workdir}/missing` }), -32004);
    await rejectsRpc(
      session.request('fs/open', { path: workdir }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /Is a directory/,
    );
  });

  test(`${kind}: chunked writes stream a file in blocks`, options, async (t) => {
    const { session, workdir } = await fsEnv(t, kind);
    const data = randomBytes(3 * 1024 * 1024 + 17);
    const { handleId } = await session.request<{ handleId: string }>('fs/openWrite', { path: `${workdir}/up.bin` });
    assert.equal(typeof handleId, 'string');
    let written = 0;
    for (let off = 0; off < data.length; off += 512 * 1024) {
      const r = await session.request<{ bytesWritten: number }>('fs/writeBlock', {
        handleId,
        chunk: data.subarray(off, off + 512 * 1024).toString('base64'),
      });
      written = r.bytesWritten;
    }
    assert.equal(written, data.length);
    assert.deepEqual(await session.request('fs/closeWrite', { handleId }), { bytesWritten: data.length });
    // Read it back in blocks and compare.
    await session.request('fs/open', { handleId: 'r', path: `${workdir}/up.bin` });
    const parts: Buffer[] = [];
    for (let off = 0; ; ) {
      const b = await session.request<{ chunk: string; eof: boolean }>('fs/readBlock', {
        handleId: 'r',
        offset: off,
        len: 1024 * 1024,
      });
      const chunk = Buffer.from(b.chunk, 'base64');
      parts.push(chunk);
      off += chunk.length;
      if (b.eof) break;
    }
    await session.request('fs/close', { handleId: 'r' });
    assert.equal(sha(Buffer.concat(parts)), sha(data));
    // Errors: bad base64, unknown handle, wrong kind, missing parent, a directory.
    const h2 = (
      await session.request<{ handleId: string }>('fs/openWrite', { handleId: 'w2', path: `${workdir}/two.bin` })
    ).handleId;
    assert.equal(h2, 'w2');
    await rejectsRpc(
      session.request('fs/writeBlock', { handleId: 'w2', chunk: '***' }),
      -32602,
      'EXEC_ERR_INVALID_PARAMS',
      /chunk/,
    );
    await rejectsRpc(
      session.request('fs/openWrite', { handleId: 'w2', path: `${workdir}/three.bin` }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /already open/,
    );
    await rejectsRpc(
      session.request('fs/readBlock', { handleId: 'w2', offset: 0, len: 1 }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /opened for writing/,
    );
    await session.request('fs/writeBlock', { handleId: 'w2', chunk: b64('abc') });
    // fs/close on a write handle aborts it.
    await session.request('fs/close', { handleId: 'w2' });
    await rejectsRpc(
      session.request('fs/writeBlock', { handleId: 'w2', chunk: b64('x') }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /unknown file handle/,
    );
    // The aborted write leaves no partial file behind.
    for (let i = 0; i < 50; i++) {
      const gone = await session.request('fs/getMetadata', { path: `${workdir}/two.bin` }).then(
        () => false,
        () => true,
      );
      if (gone) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    await rejectsRpc(session.request('fs/getMetadata', { path: `${workdir}/two.bin` }), -32004);
    await rejectsRpc(
      session.request('fs/closeWrite', { handleId: 'nope' }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /unknown file handle/,
    );
    await rejectsRpc(session.request('fs/openWrite', { path: `${workdir}/no/such/file` }), -32004);
    await rejectsRpc(
      session.request('fs/openWrite', { path: workdir }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /Is a directory/,
    );
    // Empty file.
    const h3 = (await session.request<{ handleId: string }>('fs/openWrite', { path: `${workdir}/empty.bin` })).handleId;
    assert.deepEqual(await session.request('fs/closeWrite', { handleId: h3 }), { bytesWritten: 0 });
    assert.equal((await session.request('fs/getMetadata', { path: `${workdir}/empty.bin` }))['size'], 0);
  });

  test(`${kind}: open handles are bounded per session`, options, async (t) => {
    const { session, workdir } = await fsEnv(t, kind);
    await session.request('fs/writeFile', { path: `${workdir}/f`, dataBase64: b64('f') });
    for (let i = 0; i < 16; i++) await session.request('fs/open', { handleId: i, path: `${workdir}/f` });
    await rejectsRpc(
      session.request('fs/open', { handleId: 99, path: `${workdir}/f` }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /too many open file handles.*limit 16/,
    );
    await rejectsRpc(
      session.request('fs/openWrite', { path: `${workdir}/g` }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /too many open file handles/,
    );
    await session.request('fs/close', { handleId: 3 });
    await session.request('fs/open', { handleId: 99, path: `${workdir}/f` });
  });

  test(`${kind}: fs/watchMissing notifies fs/missingChanged when a missing path appears`, options, async (t) => {
    const { session, workdir } = await fsEnv(t, kind);
    const uri = (p: string): string => `file://${p}`;
    const r = await session.request('fs/watchMissing', {
      watchId: 1,
      missing: [uri(`${workdir}/.agents/skills`), uri(`${workdir}/later.txt`)],
      present: uri(workdir),
    });
    assert.deepEqual(r, { watching: true });
    // Codex also sends `present: null`.
    assert.deepEqual(
      await session.request('fs/watchMissing', { watchId: 2, missing: [`${workdir}/never`], present: null }),
      { watching: true },
    );
    await new Promise((res) => setTimeout(res, 1500));
    assert.equal(session.notifications.filter((n) => n.method === 'fs/missingChanged').length, 0);
    await session.request('fs/writeFile', { path: `${workdir}/later.txt`, dataBase64: b64('now') });
    await session.waitFor((all) => all.some((n) => n.method === 'fs/missingChanged'), 15_000, 'fs/missingChanged');
    const changed = session.notifications.filter((n) => n.method === 'fs/missingChanged');
    assert.deepEqual(
      changed.map((n) => n.params),
      [{ watchId: 1 }],
    );
    assert.deepEqual(await session.request('fs/unwatch', { watchId: 2 }), { watching: false, removed: true });
    await rejectsRpc(
      session.request('fs/watchMissing', {
        watchId: 3,
        missing: Array.from({ length: 65 }, (_, i) => `${workdir}/m${i}`),
      }),
      -32600,
      'EXEC_ERR_TOO_LARGE',
      /at most 64 paths/,
    );
    await rejectsRpc(session.request('fs/watchMissing', { watchId: 4, missing: ['relative'] }), -32602);
  });

  test(`${kind}: a session's client and its observer keep watches of the same id apart`, options, async (t) => {
    const { server, session, workdir } = await fsEnv(t, kind);
    // An observer (a console viewer, a read token) may watch too; Codex numbers its watches from 1.
    const other = await TestSession.open(server.url, { resumeSessionId: session.sessionId, observe: true });
    t.after(() => other.close());
    for (const client of [session, other])
      assert.deepEqual(await client.request('fs/watchMissing', { watchId: 1, missing: [`${workdir}/shared.txt`] }), {
        watching: true,
      });
    // The observer's watch 1 did not replace the client's; it drops its own, not the client's.
    assert.deepEqual(await other.request('fs/unwatch', { watchId: 1 }), { watching: false, removed: true });
    assert.deepEqual(await other.request('fs/unwatch', { watchId: 1 }), { watching: false, removed: false });
    await session.request('fs/writeFile', { path: `${workdir}/shared.txt`, dataBase64: b64('here') });
    await session.waitFor((all) => all.some((n) => n.method === 'fs/missingChanged'), 15_000, 'fs/missingChanged');
    assert.deepEqual(
      session.notifications.filter((n) => n.method === 'fs/missingChanged').map((n) => n.params),
      [{ watchId: 1 }],
    );
    assert.equal(other.notifications.filter((n) => n.method === 'fs/missingChanged').length, 0);
  });
}
