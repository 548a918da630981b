/** The session sandbox and deny-read list on fs/*, symlink escapes, and the Codex per-call narrowing. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { b64, BACKENDS, fileUri, fromB64, fsEnv, rejectsRpc } from './helpers.ts';

const DENIED = -32600;

/** Codex's per-call `sandbox` objects (as in the client trace). */
function codexSandbox(
  workdir: string,
  mode: 'read-only' | 'workspace-write' | 'full-write',
  extra: unknown[] = [],
): Record<string, unknown> {
  const entries: unknown[] = [
    { path: { type: 'special', value: { kind: 'root' } }, access: mode === 'full-write' ? 'write' : 'read' },
  ];
  if (mode === 'workspace-write')
    entries.push({ path: { type: 'special', value: { kind: 'project_roots' } }, access: 'write' });
  return {
    permissions: {
      type: 'managed',
      file_system: { type: 'restricted', entries: [...entries, ...extra] },
      network: 'restricted',
    },
    cwd: fileUri(workdir),
    workspaceRoots: [fileUri(workdir)],
    windowsSandboxLevel: 'disabled',
    windowsSandboxProxySettingsMode: 'reconcile',
    useLegacyLandlock: false,
  };
}

for (const { kind, options } of BACKENDS) {
  test(`${kind}: read-only sandbox denies every write, allows reads`, options, async (t) => {
    const env = await fsEnv(t, kind, { session: () => ({ sandbox: { type: 'read-only' } }) });
    const { session, workdir } = env;
    await env.sh(`mkdir -p ${workdir}/dir && printf data > ${workdir}/dir/f.txt`);
    assert.equal(
      fromB64((await session.request('fs/readFile', { path: `${workdir}/dir/f.txt` }))['dataBase64']),
      'data',
    );
    assert.equal(
      (await session.request<{ entries: unknown[] }>('fs/readDirectory', { path: `${workdir}/dir` })).entries.length,
      1,
    );
    const denied: Array<() => Promise<unknown>> = [
      () => session.request('fs/writeFile', { path: `${workdir}/new.txt`, dataBase64: b64('x') }),
      () => session.request('fs/writeFile', { path: `${workdir}/dir/f.txt`, dataBase64: b64('x') }),
      () => session.request('fs/createDirectory', { path: `${workdir}/newdir` }),
      () => session.request('fs/remove', { path: `${workdir}/dir/f.txt` }),
      () => session.request('fs/remove', { path: `${workdir}/dir`, recursive: true }),
      () =>
        session.request('fs/copy', {
          sourcePath: `${workdir}/dir/f.txt`,
          destinationPath: `${workdir}/copy.txt`,
          recursive: false,
        }),
      () => session.request('fs/openWrite', { path: `${workdir}/chunked.txt` }),
    ];
    for (const p of denied)
      await rejectsRpc(p(), DENIED, 'EXEC_ERR_FS_DENIED', /write denied: the sandbox is read-only/);
    assert.equal(await env.sh(`cat ${workdir}/dir/f.txt; ls ${workdir}`), 'datadir\n');
  });

  test(
    `${kind}: workspace-write denies writes outside the writable roots, also through symlinks`,
    options,
    async (t) => {
      const env = await fsEnv(t, kind, {
        session: () => ({ sandbox: { type: 'workspace-write', excludeSlashTmp: true } }),
      });
      const { session, workdir, outside } = env;
      await env.sh(
        `mkdir -p ${outside}/sub && printf keep > ${outside}/keep.txt && ln -s ${outside} ${workdir}/out && ln -s ${outside}/new.txt ${workdir}/dangling && ln -s ${outside}/nodir ${workdir}/dangdir`,
      );
      // Inside: fine.
      await session.request('fs/writeFile', { path: `${workdir}/in.txt`, dataBase64: b64('in') });
      // Outside, directly and through a link.
      const cases: Array<[string, () => Promise<unknown>]> = [
        ['direct write', () => session.request('fs/writeFile', { path: `${outside}/x.txt`, dataBase64: b64('x') })],
        [
          'write through a dir link',
          () => session.request('fs/writeFile', { path: `${workdir}/out/x.txt`, dataBase64: b64('x') }),
        ],
        [
          'overwrite through a dir link',
          () => session.request('fs/writeFile', { path: `${workdir}/out/keep.txt`, dataBase64: b64('x') }),
        ],
        [
          'write through a dangling link',
          () => session.request('fs/writeFile', { path: `${workdir}/dangling`, dataBase64: b64('x') }),
        ],
        [
          'mkdir through a dangling link',
          () => session.request('fs/createDirectory', { path: `${workdir}/dangdir/a/b`, recursive: true }),
        ],
        ['mkdir through a dir link', () => session.request('fs/createDirectory', { path: `${workdir}/out/newdir` })],
        ['remove through a dir link', () => session.request('fs/remove', { path: `${workdir}/out/keep.txt` })],
        [
          'copy to a dir link',
          () =>
            session.request('fs/copy', {
              sourcePath: `${workdir}/in.txt`,
              destinationPath: `${workdir}/out/in.txt`,
              recursive: false,
            }),
        ],
        [
          'chunked write through a dir link',
          () => session.request('fs/openWrite', { path: `${workdir}/out/chunk.txt` }),
        ],
        [
          'canonical .. escape',
          () =>
            session.request('fs/writeFile', {
              path: `${workdir}/../${outside.split('/').pop()}/y.txt`,
              dataBase64: b64('x'),
            }),
        ],
      ];
      for (const [what, p] of cases) {
        const err = await rejectsRpc(p(), DENIED, 'EXEC_ERR_FS_DENIED').catch((e: Error) =>
          assert.fail(`${what}: ${e.message}`),
        );
        assert.match(err.message, /write denied: outside the writable roots|dangling symbolic link/, what);
      }
      // The link itself lives in the workspace: removing it is fine and leaves the target alone.
      await session.request('fs/remove', { path: `${workdir}/out` });
      assert.equal(await env.sh(`ls ${outside}; cat ${outside}/keep.txt`), 'keep.txt\nsub\nkeep');
      // Reading outside is allowed (no deny-read list).
      assert.equal(
        fromB64((await session.request('fs/readFile', { path: `${outside}/keep.txt` }))['dataBase64']),
        'keep',
      );
    },
  );

  test(`${kind}: deny-read paths cannot be read, listed or copied from, even through symlinks`, options, async (t) => {
    const env = await fsEnv(t, kind, {
      session: ({ workdir, outside }) => ({
        sandbox: { type: 'workspace-write', excludeSlashTmp: true },
        denyRead: [`${workdir}/secret`, `${outside}/secret.txt`, `${workdir}/tree/hidden`],
      }),
    });
    const { session, workdir, outside } = env;
    await env.sh(
      `mkdir -p ${workdir}/secret ${workdir}/tree/sub && printf s > ${workdir}/secret/s.txt && printf o > ${outside}/secret.txt && printf ok > ${workdir}/tree/sub/ok.txt` +
        ` && ln -s ${outside}/secret.txt ${workdir}/link-file && ln -s ${workdir}/secret ${workdir}/link-dir && mkdir ${workdir}/tree/hidden`,
    );
    // The parent listing hides nothing.
    const names = (
      await session.request<{ entries: Array<{ fileName: string }> }>('fs/readDirectory', { path: workdir })
    ).entries
      .map((e) => e.fileName)
      .sort();
    assert.deepEqual(names, ['link-dir', 'link-file', 'secret', 'tree']);
    const cases: Array<[string, () => Promise<unknown>]> = [
      ['read', () => session.request('fs/readFile', { path: `${workdir}/secret/s.txt` })],
      ['read via URI', () => session.request('fs/readFile', { path: fileUri(`${workdir}/secret/s.txt`) })],
      ['read outside', () => session.request('fs/readFile', { path: `${outside}/secret.txt` })],
      ['read through a file link', () => session.request('fs/readFile', { path: `${workdir}/link-file` })],
      ['read through a dir link', () => session.request('fs/readFile', { path: `${workdir}/link-dir/s.txt` })],
      ['list the denied dir', () => session.request('fs/readDirectory', { path: `${workdir}/secret` })],
      ['list through a link', () => session.request('fs/readDirectory', { path: `${workdir}/link-dir` })],
      ['metadata', () => session.request('fs/getMetadata', { path: `${workdir}/secret/s.txt` })],
      ['metadata through a link', () => session.request('fs/getMetadata', { path: `${workdir}/link-file` })],
      ['canonicalize', () => session.request('fs/canonicalize', { path: `${workdir}/link-dir/s.txt` })],
      [
        'copy a denied file',
        () =>
          session.request('fs/copy', {
            sourcePath: `${workdir}/secret/s.txt`,
            destinationPath: `${workdir}/c1`,
            recursive: false,
          }),
      ],
      [
        'copy through a link',
        () =>
          session.request('fs/copy', {
            sourcePath: `${workdir}/link-file`,
            destinationPath: `${workdir}/c2`,
            recursive: false,
          }),
      ],
      [
        'copy a tree containing one',
        () => session.request('fs/copy', { sourcePath: workdir, destinationPath: `${workdir}-copy`, recursive: true }),
      ],
      [
        'copy a subtree containing one',
        () =>
          session.request('fs/copy', {
            sourcePath: `${workdir}/tree`,
            destinationPath: `${workdir}/tree-copy`,
            recursive: true,
          }),
      ],
      ['chunked read', () => session.request('fs/open', { handleId: 'h1', path: `${workdir}/link-file` })],
      [
        'write into the denied dir',
        () => session.request('fs/writeFile', { path: `${workdir}/secret/new.txt`, dataBase64: b64('x') }),
      ],
      [
        'remove a tree containing one',
        () => session.request('fs/remove', { path: `${workdir}/tree`, recursive: true }),
      ],
      ['watch', () => session.request('fs/watchMissing', { watchId: 1, missing: [`${workdir}/secret/later`] })],
    ];
    for (const [what, p] of cases) {
      const err = await rejectsRpc(p(), DENIED, 'EXEC_ERR_FS_DENIED').catch((e: Error) =>
        assert.fail(`${what}: ${e.message}`),
      );
      assert.match(err.message, /denied/, what);
    }
    // A tree without denied paths copies fine; the denied dir is still there.
    await session.request('fs/copy', {
      sourcePath: `${workdir}/tree/sub`,
      destinationPath: `${workdir}/sub-copy`,
      recursive: true,
    });
    assert.equal(
      fromB64((await session.request('fs/readFile', { path: `${workdir}/sub-copy/ok.txt` }))['dataBase64']),
      'ok',
    );
    assert.equal(await env.sh(`cat ${workdir}/secret/s.txt; ls ${workdir}/tree`), 'shidden\nsub\n');
  });

  test(`${kind}: danger-full-access allows everything`, options, async (t) => {
    const env = await fsEnv(t, kind, { session: () => ({ sandbox: { type: 'danger-full-access' } }) });
    const { session, outside } = env;
    await session.request('fs/writeFile', { path: `${outside}/full.txt`, dataBase64: b64('full') });
    assert.equal(await env.sh(`cat ${outside}/full.txt`), 'full');
    await session.request('fs/remove', { path: `${outside}/full.txt` });
  });

  test(`${kind}: the Codex per-call sandbox narrows and never widens`, options, async (t) => {
    const env = await fsEnv(t, kind, {
      session: () => ({ sandbox: { type: 'workspace-write', excludeSlashTmp: true } }),
    });
    const { session, workdir, outside } = env;
    await env.sh(`printf p > ${workdir}/private.txt`);
    /** fs/writeFile of `x` at `path` under a Codex sandbox of `mode`. */
    const writeUnder = (path: string, mode: Parameters<typeof codexSandbox>[1]) =>
      session.request('fs/writeFile', { path, dataBase64: b64('x'), sandbox: codexSandbox(workdir, mode) });
    // Codex read-only: no write even in the workspace.
    await rejectsRpc(writeUnder(`${workdir}/a.txt`, 'read-only'), DENIED, 'EXEC_ERR_FS_DENIED');
    // Codex workspace-write: the workspace is writable.
    await writeUnder(`${workdir}/a.txt`, 'workspace-write');
    // Codex asking for write on / cannot widen the session policy.
    await rejectsRpc(writeUnder(`${outside}/a.txt`, 'full-write'), DENIED, 'EXEC_ERR_FS_DENIED');
    // A Codex deny entry (`access: none`) denies reads.
    const deny = [{ path: { type: 'path', path: fileUri(`${workdir}/private.txt`) }, access: 'none' }];
    await rejectsRpc(
      session.request('fs/readFile', {
        path: `${workdir}/private.txt`,
        sandbox: codexSandbox(workdir, 'workspace-write', deny),
      }),
      DENIED,
      'EXEC_ERR_FS_DENIED',
    );
    assert.equal(
      fromB64((await session.request('fs/readFile', { path: `${workdir}/private.txt`, sandbox: null }))['dataBase64']),
      'p',
    );
  });
}
