/**
 * Every command gets a HOME: the session's home (the sandbox user's for a sandboxed attempt on
 * docker), through the JSON-RPC start without an env, the HTTP `exec_command` facade (login
 * shell) and PTY mode; a HOME the client names is kept.
 */
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { homedir } from 'node:os';
import { test } from 'node:test';
import { BACKENDS } from '../support/backends.ts';
import { startServer, TestSession } from '../support/harness.ts';
import { newSession, serverWithApi } from '../http/helpers.ts';
import type { ExecToolResult } from '../../src/protocol/index.ts';

/**
 * HOME of a sandboxed and of an unsandboxed command. A root server's sandboxed commands run as
 * users of their own: a HOME they cannot search (root's, mode 0700) becomes their /tmp.
 */
const closedToOthers = process.getuid?.() === 0 && (statSync(homedir()).mode & 0o001) === 0;
const EXPECTED = {
  local: { sandboxed: closedToOthers ? '/tmp' : homedir(), unsandboxed: homedir() },
  docker: { sandboxed: '/home/sandbox', unsandboxed: '/root' },
} as const;

/** What a login shell prints when it runs without HOME: paths such as `/.cargo/env`, `/.profile`. */
const MISSING_HOME = /(^|[\s:'"])\/\.[A-Za-z]/m;

for (const backend of BACKENDS) {
  test(`${backend}: HOME for process/start without env (pipe and PTY), sandboxed or not; the client's HOME is kept`, {
    timeout: 120_000,
  }, async (t) => {
    const server = await startServer({ backend });
    t.after(() => server.close());
    const s = await TestSession.open(server.url);
    t.after(() => s.close());
    const pipe = await s.run('pipe', ['sh', '-c', 'echo "$HOME"']);
    assert.equal(pipe.stdout, `${EXPECTED[backend].sandboxed}\n`);
    const pty = await s.run('pty', ['sh', '-c', 'echo "$HOME"'], { tty: true });
    assert.match(pty.pty, new RegExp(`^${EXPECTED[backend].sandboxed}\\r?\\n$`));
    const escalated = await s.run('root', ['sh', '-c', 'echo "$HOME"'], {
      sandboxPermissions: 'require-escalated',
      approval: 'approved',
    });
    assert.equal(escalated.stdout, `${EXPECTED[backend].unsandboxed}\n`);
    const named = await s.run('named', ['sh', '-c', 'echo "$HOME"'], { env: { HOME: '/tmp' } });
    assert.equal(named.stdout, '/tmp\n');
  });

  test(`${backend}: exec_command's login shell has HOME and prints nothing about a missing one`, {
    timeout: 120_000,
  }, async (t) => {
    const api = await serverWithApi(t, { backend });
    const id = await newSession(api);
    const r = await api<ExecToolResult>('POST', `/v1/sessions/${id}/exec_command`, { cmd: 'echo "HOME=$HOME"' });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.exit_code, 0);
    // The docker tests' small image has no locale data, so bash warns about the facade's
    // LC_ALL=C.UTF-8; the session image has it (test/session-image/ asserts a silent shell).
    const output =
      backend === 'docker'
        ? r.body.output.replace(/^.*setlocale: LC_ALL: cannot change locale.*\n/m, '')
        : r.body.output;
    assert.match(output, new RegExp(`(^|\\n)HOME=${EXPECTED[backend].sandboxed}\\n$`));
    assert.doesNotMatch(output, MISSING_HOME);
  });
}

test('local: a PTY-mode command under the sandbox has a terminal with a name (`tty`)', {
  timeout: 120_000,
  skip:
    process.getuid?.() === 0
      ? false
      : 'the host terminals are shown to sandboxes only where their commands run as users of their own (a root server)',
}, async (t) => {
  const server = await startServer({ backend: 'local' });
  t.after(() => server.close());
  const s = await TestSession.open(server.url);
  t.after(() => s.close());
  const r = await s.run('tty', ['sh', '-c', 'tty; test -t 0 && echo stdin-is-a-terminal'], { tty: true });
  assert.match(r.pty, /^\/dev\/pts\/\d+\r\nstdin-is-a-terminal\r\n$/);
  // The other terminals of the host are listed, but closed to the session's user.
  const other = await s.run(
    'other',
    [
      'sh',
      '-c',
      'for p in /dev/pts/[0-9]*; do [ "$p" = "$(tty)" ] && continue; [ -w "$p" ] && echo "writable $p"; done; echo done',
    ],
    { tty: true },
  );
  assert.match(other.pty, /^done\r\n$/);
});
