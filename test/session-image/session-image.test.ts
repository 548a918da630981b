/**
 * The default session image (scripts/build-session-image.sh) is one an agent can work in: run
 * on the docker backend as an agent would, sandboxed as the `sandbox` user, through login
 * shells. Under CI=true the image must exist (.ci/run builds it); elsewhere a missing image
 * skips this file with the command that builds it.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { dockerTestOptions, engineReady, IN_CI } from '../docker/engine.ts';
import { serverFor, sessionFor } from '../support/harness.ts';

const SESSION_IMAGE = process.env['EXEC_SERVER_SESSION_IMAGE'] ?? 'exec-server-session:latest';

async function imageMissing(): Promise<string | undefined> {
  if (!engineReady) return 'no Docker engine';
  try {
    await promisify(execFile)('docker', ['image', 'inspect', SESSION_IMAGE], { timeout: 30_000 });
    return undefined;
  } catch {
    return `${SESSION_IMAGE} is missing: build it with bash scripts/build-session-image.sh`;
  }
}

const missing = await imageMissing();
if (missing !== undefined && engineReady && IN_CI) {
  test('the session image exists (required under CI=true)', () => {
    throw new Error(missing);
  });
}
const options = missing === undefined ? { ...dockerTestOptions, timeout: 240_000 } : { skip: missing };

test(
  'session image: git clone of a local repository, python3, node, a C compiler, ripgrep, curl; a clean login shell as the sandbox user',
  options,
  async (t) => {
    const server = await serverFor(t, { backend: 'docker' });
    const s = await sessionFor(t, server.url, { session: { image: SESSION_IMAGE } });
    const login = async (id: string, script: string): Promise<{ stdout: string; stderr: string; code: unknown }> => {
      await s.start(id, ['bash', '-lc', script]);
      const r = await s.result(id, 120_000);
      return { stdout: r.stdout, stderr: r.stderr, code: r.exited['exitCode'] };
    };

    const who = await login('who', 'echo "$(id -un) $HOME $LANG"; cd ~ && pwd; python3 -c "print(chr(233))"');
    assert.deepEqual(
      who,
      { stdout: 'sandbox /home/sandbox C.UTF-8\n/home/sandbox\né\n', stderr: '', code: 0 },
      'a login shell starts without errors (locale, HOME)',
    );

    const git = await login(
      'git',
      [
        'set -e',
        'git init -q -b main origin && cd origin',
        'git config user.email agent@example.com && git config user.name agent',
        'echo "print(6 * 7)" > answer.py && git add answer.py && git commit -q -m "first commit"',
        'cd .. && git clone -q origin clone',
        'git -C clone log --format=%s',
        'python3 clone/answer.py',
      ].join('\n'),
    );
    assert.deepEqual(git, { stdout: 'first commit\n42\n', stderr: '', code: 0 });

    const tools = await login(
      'tools',
      [
        'set -e',
        'node -e "console.log(Number(process.versions.node.split(\'.\')[0]) >= 18)"',
        'python3 -c "import json, ssl, venv; print(json.dumps({\'ok\': True}))"',
        'printf "#include <stdio.h>\\nint main(void){puts(\\"compiled\\");return 0;}\\n" > hello.c && cc -o hello hello.c && ./hello',
        'printf "one\\nneedle two\\n" > hay.txt && rg -n needle hay.txt',
        'curl --version | head -1 | cut -d" " -f1',
        'test -s /etc/ssl/certs/ca-certificates.crt && echo certs',
        'echo "$(ps -o comm= -p $$)"',
      ].join('\n'),
    );
    assert.deepEqual(tools, {
      stdout: 'true\n{"ok": true}\ncompiled\n2:needle two\ncurl\ncerts\nbash\n',
      stderr: '',
      code: 0,
    });

    // PTY mode: a terminal that `tty` can name.
    await s.start('tty', ['bash', '-lc', 'tty; echo "cols=$(stty size | cut -d" " -f2)"'], {
      tty: true,
      size: { cols: 91, rows: 20 },
    });
    const pty = await s.result('tty', 60_000);
    assert.match(pty.pty, /^\/dev\/pts\/\d+\r?\ncols=91\r?\n$/);
  },
);
