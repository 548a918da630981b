/** Every fs/* method and environment/info on both backends: results and error paths. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { b64, BACKENDS, fileUri, fromB64, fsEnv, rejectsRpc } from './helpers.ts';

for (const { kind, options } of BACKENDS) {
  test(`${kind}: environment/info describes the session`, options, async (t) => {
    const { session, workdir } = await fsEnv(t, kind);
    const info = await session.request('environment/info', null);
    assert.equal(info['cwd'], fileUri(workdir));
    assert.equal(typeof (info['shell'] as { path: string }).path, 'string');
    assert.equal(info['platformOs'], 'linux');
    assert.equal((info['capabilities'] as Record<string, boolean>)['fsWatchMissing'], true);
  });

  test(`${kind}: write, read, metadata, list, canonicalize, copy, remove round trip`, options, async (t) => {
    const { session, workdir } = await fsEnv(t, kind);
    const dir = `${workdir}/d`;
    assert.deepEqual(await session.request('fs/createDirectory', { path: `${dir}/e/f`, recursive: true }), {});
    // A native path and a file:// URI are both accepted.
    assert.deepEqual(await session.request('fs/writeFile', { path: `${dir}/a.txt`, dataBase64: b64('hello') }), {});
    assert.deepEqual(
      await session.request('fs/writeFile', {
        path: fileUri(`${dir}/b c.txt`),
        dataBase64: b64('with space'),
        sandbox: null,
      }),
      {},
    );
    assert.equal(
      fromB64((await session.request('fs/readFile', { path: fileUri(`${dir}/a.txt`) }))['dataBase64']),
      'hello',
    );
    assert.equal(
      fromB64((await session.request('fs/readFile', { path: `${dir}/b c.txt` }))['dataBase64']),
      'with space',
    );
    // Empty file.
    await session.request('fs/writeFile', { path: `${dir}/empty`, dataBase64: '' });
    assert.equal((await session.request('fs/readFile', { path: `${dir}/empty` }))['dataBase64'], '');

    const meta = await session.request('fs/getMetadata', { path: fileUri(`${dir}/a.txt`), sandbox: null });
    assert.deepEqual(Object.keys(meta).sort(), [
      'createdAtMs',
      'isDirectory',
      'isFile',
      'isSymlink',
      'modifiedAtMs',
      'size',
    ]);
    assert.equal(meta['isFile'], true);
    assert.equal(meta['isDirectory'], false);
    assert.equal(meta['isSymlink'], false);
    assert.equal(meta['size'], 5);
    assert.ok(Math.abs((meta['modifiedAtMs'] as number) - Date.now()) < 120_000);
    const dmeta = await session.request('fs/getMetadata', { path: dir });
    assert.equal(dmeta['isDirectory'], true);

    const list = await session.request<{ entries: Array<{ fileName: string; isDirectory: boolean; isFile: boolean }> }>(
      'fs/readDirectory',
      { path: fileUri(dir) },
    );
    assert.deepEqual(list.entries.map((e) => `${e.fileName}:${e.isDirectory ? 'd' : e.isFile ? 'f' : 'o'}`).sort(), [
      'a.txt:f',
      'b c.txt:f',
      'e:d',
      'empty:f',
    ]);

    // canonicalize resolves `..` and answers in the form asked.
    assert.deepEqual(await session.request('fs/canonicalize', { path: `${dir}/e/../a.txt` }), { path: `${dir}/a.txt` });
    assert.deepEqual(await session.request('fs/canonicalize', { path: fileUri(`${dir}/e/f/..`) }), {
      path: fileUri(`${dir}/e`),
    });

    // copy: a file, then a tree.
    await session.request('fs/copy', {
      sourcePath: `${dir}/a.txt`,
      destinationPath: `${dir}/a2.txt`,
      recursive: false,
    });
    assert.equal(fromB64((await session.request('fs/readFile', { path: `${dir}/a2.txt` }))['dataBase64']), 'hello');
    await session.request('fs/copy', {
      sourcePath: fileUri(dir),
      destinationPath: fileUri(`${workdir}/d2`),
      recursive: true,
    });
    assert.equal(
      fromB64((await session.request('fs/readFile', { path: `${workdir}/d2/b c.txt` }))['dataBase64']),
      'with space',
    );
    assert.equal((await session.request('fs/getMetadata', { path: `${workdir}/d2/e/f` }))['isDirectory'], true);

    // Overwrite truncates.
    await session.request('fs/writeFile', { path: `${dir}/a.txt`, dataBase64: b64('x') });
    assert.equal(fromB64((await session.request('fs/readFile', { path: `${dir}/a.txt` }))['dataBase64']), 'x');

    // remove: file, tree, force on a missing path.
    assert.deepEqual(await session.request('fs/remove', { path: `${dir}/a2.txt` }), {});
    await rejectsRpc(
      session.request('fs/getMetadata', { path: `${dir}/a2.txt` }),
      -32004,
      'EXEC_ERR_NOT_FOUND',
      /^No such file or directory \(os error 2\)$/,
    );
    assert.deepEqual(await session.request('fs/remove', { path: `${workdir}/d2`, recursive: true }), {});
    await rejectsRpc(session.request('fs/readDirectory', { path: `${workdir}/d2` }), -32004);
    assert.deepEqual(await session.request('fs/remove', { path: `${workdir}/d2`, recursive: true, force: true }), {});

    // Files written over fs are what commands see, and the other way round.
    const r = await session.run('cat1', ['cat', `${dir}/a.txt`]);
    assert.equal(r.stdout, 'x');
    await session.run('w1', ['sh', '-c', `printf from-cmd > ${dir}/cmd.txt`]);
    assert.equal(fromB64((await session.request('fs/readFile', { path: `${dir}/cmd.txt` }))['dataBase64']), 'from-cmd');
  });

  test(`${kind}: error paths`, options, async (t) => {
    const { session, workdir } = await fsEnv(t, kind);
    await session.request('fs/createDirectory', { path: `${workdir}/dir` });
    await session.request('fs/writeFile', { path: `${workdir}/file`, dataBase64: b64('f') });
    // Not found: -32004 with Codex's message, on every reading method.
    for (const method of ['fs/readFile', 'fs/getMetadata', 'fs/readDirectory', 'fs/canonicalize', 'fs/remove']) {
      const err = await rejectsRpc(
        session.request(method, { path: `${workdir}/missing` }),
        -32004,
        'EXEC_ERR_NOT_FOUND',
      );
      assert.equal(err.message, 'No such file or directory (os error 2)', method);
      assert.equal(err.data?.['path'], `${workdir}/missing`);
    }
    await rejectsRpc(
      session.request('fs/copy', {
        sourcePath: `${workdir}/missing`,
        destinationPath: `${workdir}/x`,
        recursive: false,
      }),
      -32004,
    );
    // Missing parent without recursive.
    await rejectsRpc(session.request('fs/createDirectory', { path: `${workdir}/no/such/dir` }), -32004);
    await rejectsRpc(
      session.request('fs/writeFile', { path: `${workdir}/no/such/file`, dataBase64: b64('x') }),
      -32004,
    );
    // Is a directory.
    await rejectsRpc(
      session.request('fs/readFile', { path: `${workdir}/dir` }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /Is a directory/,
    );
    await rejectsRpc(
      session.request('fs/writeFile', { path: `${workdir}/dir`, dataBase64: b64('x') }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /Is a directory/,
    );
    // Non-recursive remove or copy of a directory: the client's mistake.
    await rejectsRpc(
      session.request('fs/remove', { path: `${workdir}/dir` }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /Is a directory/,
    );
    await rejectsRpc(
      session.request('fs/copy', {
        sourcePath: `${workdir}/dir`,
        destinationPath: `${workdir}/dir2`,
        recursive: false,
      }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /Is a directory/,
    );
    // A directory is copied only to a new path.
    await rejectsRpc(
      session.request('fs/copy', { sourcePath: `${workdir}/dir`, destinationPath: `${workdir}/dir`, recursive: true }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /already exists/,
    );
    // Listing a file, and mkdir of an existing path without recursive: the client's mistakes.
    await rejectsRpc(
      session.request('fs/readDirectory', { path: `${workdir}/file` }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /Not a directory/,
    );
    await rejectsRpc(
      session.request('fs/createDirectory', { path: `${workdir}/dir` }),
      -32600,
      'EXEC_ERR_INVALID_REQUEST',
      /File exists/,
    );
    assert.deepEqual(await session.request('fs/createDirectory', { path: `${workdir}/dir`, recursive: true }), {});
    // Bad params: relative path, bad base64, missing fields, wrong types.
    const invalid: Array<[method: string, params: Record<string, unknown>, names: RegExp]> = [
      ['fs/readFile', { path: 'relative/file' }, /path/],
      ['fs/writeFile', { path: `${workdir}/b`, dataBase64: 'not base64!' }, /dataBase64/],
      ['fs/writeFile', { path: `${workdir}/b`, dataBase64: 'abc' }, /dataBase64/],
      ['fs/writeFile', { path: `${workdir}/b` }, /dataBase64/],
      ['fs/copy', { sourcePath: `${workdir}/file`, destinationPath: `${workdir}/c` }, /recursive/],
      ['fs/remove', { path: `${workdir}/file`, recursive: 'yes' }, /recursive/],
      ['fs/getMetadata', { path: 'file://otherhost/etc/passwd' }, /host/],
    ];
    for (const [method, params, names] of invalid)
      await rejectsRpc(session.request(method, params), -32602, 'EXEC_ERR_INVALID_PARAMS', names);
    // Nothing was written by the rejected calls.
    await rejectsRpc(session.request('fs/getMetadata', { path: `${workdir}/b` }), -32004);
  });
}
