import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { type TestContext, test } from 'node:test';
import { startServer, type TestServer } from '../support/harness.ts';
import { requireTmux, Tmux } from './tmux.ts';

const MAIN = fileURLToPath(new URL('../../src/main.ts', import.meta.url));
const CLI = `node --import tsx ${MAIN}`;
const CWD = fileURLToPath(new URL('../..', import.meta.url));

function cli(
  args: string[],
  env: Record<string, string>,
  input?: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(
      'node',
      ['--import', 'tsx', MAIN, ...args],
      { cwd: CWD, env: { ...process.env, ...env }, timeout: 60_000 },
      (err, stdout, stderr) => {
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
      },
    );
    if (input !== undefined) child.stdin?.end(input);
    else child.stdin?.end();
  });
}

test("run: streams output and exits with the command's code; --json; sessions list/delete", {
  timeout: 360_000,
}, async (t) => {
  const server = await startServer({ flags: ['--token', 'tok'] });
  t.after(() => server.close());
  const env = { EXEC_SERVER_URL: server.url, EXEC_SERVER_TOKEN: 'tok' };
  const r = await cli(['run', '--', 'sh', '-c', 'echo to-out; echo to-err >&2; exit 7'], env);
  assert.equal(r.code, 7);
  assert.equal(r.stdout, 'to-out\n');
  assert.match(r.stderr, /to-err\n/);
  const piped = await cli(['run', '--', 'sh', '-c', 'tr a-z A-Z'], env, 'piped input\n');
  assert.equal(piped.code, 0);
  assert.equal(piped.stdout, 'PIPED INPUT\n');
  const json = await cli(['run', '--json', '--', 'sh', '-c', 'printf "%s" héllo; exit 4'], env);
  assert.equal(json.code, 4);
  const parsed = JSON.parse(json.stdout);
  assert.equal(parsed.exitCode, 4);
  assert.equal(parsed.stdout, 'héllo');
  assert.equal(parsed.terminal, 'exited');
  // run deletes its session.
  const list = await cli(['sessions', 'list', '--json'], env);
  assert.equal(list.code, 0);
  assert.deepEqual(JSON.parse(list.stdout), []);
  // --keep leaves it; sessions shows and deletes it.
  const keptStarted = Date.now();
  const kept = await cli(['run', '--keep', '--', 'true'], env);
  assert.equal(kept.code, 0, "run --keep returns with the command's code");
  assert.ok(Date.now() - keptStarted < 30_000, 'run --keep returns once the command ended');
  const id = /session kept: ([0-9a-f-]{36})/.exec(kept.stderr)?.[1];
  assert.ok(id, kept.stderr);
  const table = await cli(['sessions'], env);
  assert.match(table.stdout, /^SESSION\s+STATUS/);
  assert.match(table.stdout, new RegExp(id));
  // fork: bounded count; the local backend has no snapshots, said plainly.
  const badCount = await cli(['sessions', 'fork', id, '--count', '17'], env);
  assert.equal(badCount.code, 2);
  assert.match(badCount.stderr, /--count: expected an integer from 1 to 16/);
  const noFork = await cli(['sessions', 'fork', id, '--memory'], env);
  assert.equal(noFork.code, 125);
  assert.match(noFork.stderr, /EXEC_ERR_UNSUPPORTED/);
  const del = await cli(['sessions', 'delete', id], env);
  assert.equal(del.code, 0);
  assert.equal(del.stdout, `deleted ${id}\n`);
  const missing = await cli(['sessions', 'delete', id], env);
  assert.equal(missing.code, 125);
  assert.match(missing.stderr, /EXEC_ERR_SESSION_NOT_FOUND, HTTP 404/);
  // Errors are readable and have their own exit codes.
  const usage = await cli(['run'], env);
  assert.equal(usage.code, 2);
  assert.match(usage.stderr, /run needs a command/);
  const badToken = await cli(['run', '--token', 'nope', '--', 'true'], env);
  assert.equal(badToken.code, 125);
  assert.match(badToken.stderr, /refused the token/);
  const port = await new Promise<number>((resolve) => {
    const srv = createServer().listen(0, '127.0.0.1', () => {
      const p = (srv.address() as { port: number }).port;
      srv.close(() => resolve(p));
    });
  });
  const down = await cli(['sessions', '--url', `ws://127.0.0.1:${port}`], {});
  assert.equal(down.code, 125);
  assert.match(down.stderr, /cannot connect to the server/);
});

/** A server, and a 100x30 tmux terminal in the checkout whose commands reach it; both end with the test. */
async function serverInTmux(t: TestContext): Promise<{ server: TestServer; term: Tmux }> {
  const server = await startServer();
  t.after(() => server.close());
  const term = new Tmux({ EXEC_SERVER_URL: server.url, PS1: '$ ' }, 100, 30);
  t.after(() => term.kill());
  term.line(`cd ${CWD}`);
  return { server, term };
}

test("run in a real terminal (tmux): exit codes and a PTY of the terminal's size", { timeout: 180_000 }, async (t) => {
  if (!requireTmux(t)) return;
  const { term } = await serverInTmux(t);
  term.line(`${CLI} run -- sh -c 'echo run-says-$((40+2)); exit 3'; echo "EXIT=$?"`);
  await term.waitFor(/run-says-42\s*\n(?:.*\n)*?EXIT=3/, 60_000);
  term.line(`${CLI} run -- false; echo "EXIT=$?"`);
  await term.waitFor(/EXIT=1/, 60_000);
  term.line(`${CLI} run --tty -- sh -c 'test -t 0 && echo stdin-is-a-tty; stty size; exit 5'; echo "EXIT=$?"`);
  const m = await term.waitFor(/stdin-is-a-tty\s*\n(\d+) (\d+)\s*\n(?:.*\n)*?EXIT=5/, 60_000);
  assert.equal(`${m[1]} ${m[2]}`, '30 100');
});

test('shell in a real terminal (tmux): interactive use, resize, detach and re-attach', {
  timeout: 240_000,
}, async (t) => {
  if (!requireTmux(t)) return;
  const { server, term } = await serverInTmux(t);
  term.line(`${CLI} shell; echo "SHELL-EXIT=$?"`);
  const id = (await term.waitFor(/shell in session ([0-9a-f-]{36})/, 60_000))[1]!;
  term.line('echo "inside-$((6*7))"');
  await term.waitFor(/inside-42/, 30_000);
  term.line('stty size');
  await term.waitFor(/^30 100\s*$/m, 30_000);
  term.resize(120, 40);
  await new Promise((r) => setTimeout(r, 500));
  term.line('stty size');
  await term.waitFor(/^40 120\s*$/m, 30_000);
  // A process left running keeps running across a detach.
  term.line('sleep 300 & echo "bg-$!"');
  await term.waitFor(/bg-\d+/, 30_000);
  term.keys('C-]', 'd');
  await term.waitFor(new RegExp(`detached; re-attach with: exec-server shell --attach ${id}`), 30_000);
  await term.waitFor(/SHELL-EXIT=0/, 30_000);
  const info = await (await fetch(`${server.httpUrl}/v1/sessions/${id}`)).json();
  assert.equal(info.status, 'alive');
  assert.equal(info.attached, false);
  term.line(`${CLI} shell --attach ${id}; echo "ATTACH-EXIT=$?"`);
  await term.waitFor(/attached to session/, 60_000);
  term.line('echo "back-$((1+1))"; jobs | wc -l');
  await term.waitFor(/back-2\s*\n1\s*$/m, 30_000);
  term.line('exit 6');
  await term.waitFor(/ATTACH-EXIT=6/, 30_000);
  const gone = await fetch(`${server.httpUrl}/v1/sessions/${id}`);
  assert.equal(gone.status, 404, 'the session is deleted when its shell exits');
});
