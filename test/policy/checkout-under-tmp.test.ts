/**
 * A root server whose checkout lies under /tmp: the session's private /tmp hid the sandbox
 * helper (build/sandbox-join, which runs inside the sandbox as the warm sandbox's holder and
 * for a cold command's change of user), so every sandboxed command failed. The checkout is
 * copied under /tmp and run as its own server process; sandboxed commands run, as the
 * session's own user.
 */
import assert from 'node:assert/strict';
import { cp, mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ExecServerClient } from '../../src/client/index.ts';
import { startServerProcess } from '../support/server-process.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Sandboxed commands change user only on a root server: elsewhere there is nothing to show. */
const rootOnly =
  process.getuid?.() === 0 || process.env['CI'] === 'true'
    ? {}
    : { skip: 'the sandbox helper runs inside the sandbox only on a root server' };

test('a root server run from a checkout under /tmp runs sandboxed commands', {
  ...rootOnly,
  timeout: 180_000,
}, async (t) => {
  const checkout = await mkdtemp(join(tmpdir(), 'exec-server-checkout-'));
  t.after(() => rm(checkout, { recursive: true, force: true }));
  for (const part of ['bin', 'src', 'build', 'package.json'])
    await cp(join(ROOT, part), join(checkout, part), { recursive: true });
  await symlink(join(ROOT, 'node_modules'), join(checkout, 'node_modules'));
  const workspaces = await mkdtemp(join(tmpdir(), 'exec-server-ws-'));
  t.after(() => rm(workspaces, { recursive: true, force: true }));

  const server = await startServerProcess(
    join(checkout, 'bin', 'exec-server.js'),
    ['--workspace-root', workspaces, '--token', 't'],
    { cwd: checkout },
  );
  t.after(() => server.stop());
  const client = await ExecServerClient.connect(server.url, {
    token: 't',
    session: { sandbox: { type: 'workspace-write' } },
  });
  const info = await client.sessionInfo();
  assert.equal(info.sandboxType, 'bubblewrap');
  const r = await client.exec(['sh', '-c', 'echo ran as $(id -u); touch inside && echo wrote'], {
    cwd: info.workdir,
  });
  const result = await r.wait({ check: false });
  assert.equal(result.stderr, '', server.stderr().slice(-2000));
  assert.equal(result.exitCode, 0);
  assert.equal(result.sandboxDenied, false);
  const [ran, wrote] = result.stdout.trim().split('\n');
  assert.match(ran ?? '', /^ran as \d+$/);
  assert.notEqual(ran, 'ran as 0', 'the command runs as the session user, not root');
  assert.equal(wrote, 'wrote');
  await client.deleteSession();
});
