/**
 * Filesystem edge cases that both backends must answer alike (docs/filesystem.md, error table):
 * symlink loops and paths through a file, FIFOs and devices (refused at once, never a hang or an
 * endless read), /proc files (read), devices' metadata.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ExecServerHttpError } from '../../src/client/errors.ts';
import { HttpFiles } from '../../src/client/files.ts';
import { MAX_LISTING_ENTRIES } from '../../src/backends/fs-errors.ts';
import { within } from '../support/harness.ts';
import { b64, BACKENDS, fsEnv, rejectsRpc } from './helpers.ts';

/** Longer than any answer should take; a FIFO opened blocking never answers. */
const BOUND_MS = 5000;

for (const { kind, options } of BACKENDS) {
  test(`${kind}: loops are ELOOP, paths through a file ENOTDIR, long names ENAMETOOLONG`, options, async (t) => {
    const { session, workdir: w, sh } = await fsEnv(t, kind);
    await sh(`cd ${w} && ln -s loop-b loop-a && ln -s loop-a loop-b && ln -s self self && echo f > file`);
    const refused = async (method: string, params: Record<string, unknown>, errno: string): Promise<void> => {
      const err = await rejectsRpc(within(session.request(method, params), BOUND_MS, method), -32600);
      assert.equal(err.code, 'EXEC_ERR_INVALID_REQUEST', `${method} ${JSON.stringify(params)}: ${err.message}`);
      assert.equal(err.data?.['errno'], errno, `${method} ${JSON.stringify(params)}: ${err.message}`);
    };
    for (const path of [`${w}/loop-a`, `${w}/self`, `${w}/loop-b/x`]) {
      await refused('fs/readFile', { path }, 'ELOOP');
      await refused('fs/getMetadata', { path }, 'ELOOP');
      await refused('fs/readDirectory', { path }, 'ELOOP');
      await refused('fs/canonicalize', { path }, 'ELOOP');
      await refused('fs/open', { path }, 'ELOOP');
      await refused('fs/writeFile', { path, dataBase64: b64('x') }, 'ELOOP');
      await refused('fs/copy', { sourcePath: path, destinationPath: `${w}/c`, recursive: false }, 'ELOOP');
    }
    await refused('fs/createDirectory', { path: `${w}/loop-a/sub`, recursive: true }, 'ELOOP');
    await refused('fs/remove', { path: `${w}/loop-a/x` }, 'ELOOP');
    for (const path of [`${w}/file/x`, `${w}/file/x/y`]) {
      await refused('fs/getMetadata', { path }, 'ENOTDIR');
      await refused('fs/readFile', { path }, 'ENOTDIR');
      await refused('fs/readDirectory', { path }, 'ENOTDIR');
      await refused('fs/writeFile', { path, dataBase64: b64('x') }, 'ENOTDIR');
      await refused('fs/createDirectory', { path, recursive: true }, 'ENOTDIR');
    }
    // A name longer than NAME_MAX: invalid params, whatever the operation.
    const long = `${w}/${'n'.repeat(256)}`;
    for (const [method, params] of [
      ['fs/getMetadata', { path: long }],
      ['fs/readFile', { path: long }],
      ['fs/remove', { path: long }],
      ['fs/writeFile', { path: long, dataBase64: b64('x') }],
    ] as const) {
      const err = await rejectsRpc(session.request(method, params), -32602, 'EXEC_ERR_INVALID_PARAMS');
      assert.equal(err.data?.['errno'], 'ENAMETOOLONG', `${method}: ${err.message}`);
    }
    // The loop's links themselves are still what they are: removable.
    assert.deepEqual(await session.request('fs/remove', { path: `${w}/loop-a` }), {});
  });

  test(`${kind}: FIFOs and devices are refused at once; /proc files are read`, options, async (t) => {
    const env = await fsEnv(t, kind);
    const { session, workdir: w } = env;
    await env.sh(`mkfifo ${w}/fifo && ln -s /dev/zero ${w}/zero`);
    const notRegular = /not a regular file/;
    const refused = async (method: string, params: Record<string, unknown>): Promise<void> => {
      await rejectsRpc(
        within(session.request(method, params), BOUND_MS, method),
        -32600,
        'EXEC_ERR_INVALID_REQUEST',
        notRegular,
      );
    };
    // More calls than libuv has threads: one blocking open each would stall every later call.
    for (let i = 0; i < 5; i++) {
      await refused('fs/readFile', { path: `${w}/fifo` });
      await refused('fs/writeFile', { path: `${w}/fifo`, dataBase64: b64('x') });
    }
    for (const path of [`${w}/fifo`, '/dev/zero', '/dev/urandom', `${w}/zero`]) {
      await refused('fs/readFile', { path });
      await refused('fs/open', { path });
      await refused('fs/copy', { sourcePath: path, destinationPath: `${w}/copy`, recursive: false });
    }
    await refused('fs/openWrite', { path: `${w}/fifo` });
    const files = new HttpFiles({ baseUrl: env.server.url, sessionId: session.sessionId });
    const http: Array<Promise<unknown>> = [
      files.downloadStream(`${w}/fifo`),
      files.upload(`${w}/fifo`, Buffer.from('x')),
    ];
    for (const p of http)
      await assert.rejects(within(p, BOUND_MS, 'HTTP'), (err: unknown) => {
        assert.ok(err instanceof ExecServerHttpError, String(err));
        assert.equal(err.status, 400, err.message);
        assert.match(err.message, notRegular);
        return true;
      });
    // Nothing was created by the refused copies; the server still answers at once.
    await rejectsRpc(within(session.request('fs/getMetadata', { path: `${w}/copy` }), BOUND_MS, 'metadata'), -32004);
    const dev = await session.request('fs/getMetadata', { path: '/dev/zero' });
    assert.deepEqual([dev['isFile'], dev['isDirectory']], [false, false]);
    const fifo = await session.request('fs/getMetadata', { path: `${w}/fifo` });
    assert.deepEqual([fifo['isFile'], fifo['isDirectory']], [false, false]);
    // /proc files say size 0 and are regular: read to their end.
    const cpu = await session.request('fs/readFile', { path: '/proc/cpuinfo' });
    assert.match(Buffer.from(String(cpu['dataBase64']), 'base64').toString('utf8'), /processor/);
    assert.equal((await session.request('fs/getMetadata', { path: '/proc/cpuinfo' }))['isFile'], true);
    // Over HTTP too: its size says 0, so no Content-Length of 0 followed by the bytes.
    const { stream } = await within(files.downloadStream('/proc/cpuinfo'), BOUND_MS, 'download');
    const chunks: Buffer[] = [];
    for await (const c of stream) chunks.push(c as Buffer);
    assert.match(Buffer.concat(chunks).toString('utf8'), /processor/);
  });

  test(
    `${kind}: a trailing slash names the same path; a file is not copied onto a directory or a FIFO`,
    options,
    async (t) => {
      const env = await fsEnv(t, kind);
      const { session, workdir: w } = env;
      await env.sh(`mkdir ${w}/d && printf hi > ${w}/d/f && mkfifo ${w}/fifo`);
      const text = async (path: string): Promise<string> =>
        Buffer.from(String((await session.request('fs/readFile', { path }))['dataBase64']), 'base64').toString('utf8');
      assert.equal(await text(`${w}/d/f/`), 'hi');
      assert.equal((await session.request('fs/getMetadata', { path: `${w}/d/f/` }))['isFile'], true);
      assert.deepEqual(await session.request('fs/canonicalize', { path: `${w}/d/f/` }), { path: `${w}/d/f` });
      await session.request('fs/writeFile', { path: `${w}/d/g/`, dataBase64: b64('g') });
      assert.equal(await text(`${w}/d/g`), 'g');
      await session.request('fs/createDirectory', { path: `${w}/d/e/`, recursive: false });
      assert.equal((await session.request('fs/getMetadata', { path: `${w}/d/e` }))['isDirectory'], true);
      const copy = (destinationPath: string): Promise<unknown> =>
        within(
          session.request('fs/copy', { sourcePath: `${w}/d/f`, destinationPath, recursive: false }),
          BOUND_MS,
          `copy to ${destinationPath}`,
        );
      for (const dest of [`${w}/d`, `${w}/d/`, `${w}/d/e`]) {
        const err = await rejectsRpc(copy(dest), -32600, 'EXEC_ERR_INVALID_REQUEST', /Is a directory/);
        assert.equal(err.data?.['errno'], 'EISDIR');
      }
      await rejectsRpc(copy(`${w}/fifo`), -32600, 'EXEC_ERR_INVALID_REQUEST', /not a regular file/);
      // The directory kept its entries; the copy went nowhere.
      const list = await session.request<{ entries: Array<{ fileName: string }> }>('fs/readDirectory', {
        path: `${w}/d`,
      });
      assert.deepEqual(list.entries.map((e) => e.fileName).sort(), ['e', 'f', 'g']);
      assert.deepEqual(
        await session.request('fs/copy', { sourcePath: `${w}/d/f`, destinationPath: `${w}/d/h/`, recursive: false }),
        {},
      );
      assert.equal(await text(`${w}/d/h`), 'hi');
    },
  );

  test(`${kind}: a directory of more entries than a listing answers is refused, not read whole`, options, async (t) => {
    const { session, workdir: w, sh } = await fsEnv(t, kind);
    const big = `${w}/big`;
    await sh(`mkdir ${big} && cd ${big} && seq 1 ${MAX_LISTING_ENTRIES + 1} | xargs touch`);
    const err = await rejectsRpc(
      within(session.request('fs/readDirectory', { path: big }), 30_000, 'readDirectory'),
      -32600,
      'EXEC_ERR_TOO_LARGE',
      new RegExp(`more than ${MAX_LISTING_ENTRIES} entries.*list it with a command`),
    );
    assert.equal(err.data?.['maxEntries'], MAX_LISTING_ENTRIES);
    // At the limit, every entry is answered.
    await sh(`rm ${big}/1`);
    const list = await session.request<{ entries: unknown[] }>('fs/readDirectory', { path: big });
    assert.equal(list.entries.length, MAX_LISTING_ENTRIES);
  });
}
