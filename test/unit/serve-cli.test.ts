/** `npm start` behaviour: the one stdout line, clear config errors, token never logged. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';

const main = fileURLToPath(new URL('../../src/main.ts', import.meta.url));

interface Spawned {
  child: ReturnType<typeof spawn>;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<number | null>;
}

/** `src/main.ts ARGS...` as a process of its own, its stdout and stderr kept. */
function spawnMain(args: string[], env: NodeJS.ProcessEnv = {}): Spawned {
  const child = spawn(process.execPath, ['--import', 'tsx', main, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += String(d)));
  child.stderr.on('data', (d) => (err += String(d)));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, stdout: () => out, stderr: () => err, exited };
}

const serve = (args: string[], env: NodeJS.ProcessEnv = {}): Spawned => spawnMain(['serve', ...args], env);

test('prints exactly one ws:// line once bound, serves it, shuts down on SIGTERM, never logs the token', {
  timeout: 180_000,
}, async () => {
  const s = serve(['--listen', 'ws://127.0.0.1:0', '--log-level', 'debug'], { EXEC_SERVER_TOKEN: 'top-secret-token' });
  const deadline = Date.now() + 120_000;
  while (!s.stdout().includes('\n') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  const lines = s.stdout().split('\n').filter(Boolean);
  assert.equal(lines.length, 1);
  assert.match(lines[0] ?? '', /^ws:\/\/127\.0\.0\.1:\d+$/);
  const ws = new WebSocket(lines[0] ?? '', { headers: { authorization: 'Bearer top-secret-token' } });
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  ws.close();
  s.child.kill('SIGTERM');
  assert.equal(await s.exited, 0);
  assert.equal(s.stdout().split('\n').filter(Boolean).length, 1, 'nothing else on stdout');
  assert.ok(!s.stderr().includes('top-secret-token'), 'token leaked into logs');
  assert.match(s.stderr(), /"level"/);
});

test('bad configuration exits 2 with a clear message', { timeout: 120_000 }, async () => {
  const s = serve(['--listen', 'ws://0.0.0.0:0']);
  assert.equal(await s.exited, 2);
  assert.match(
    s.stderr(),
    /invalid configuration: refusing to listen on non-loopback address 0\.0\.0\.0 without a token/,
  );
  const t = serve(['--max-processes', 'many']);
  assert.equal(await t.exited, 2);
  assert.match(t.stderr(), /--max-processes \/ EXEC_SERVER_MAX_PROCESSES: expected an integer/);
});

async function run(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const s = spawnMain(args, env);
  const code = await s.exited;
  return { code, stdout: s.stdout(), stderr: s.stderr() };
}

/** One line on stderr besides the log's JSON entries (info lines of the boot), no stack frame, exit 2. */
function assertOneLine(r: { code: number | null; stderr: string }, re: RegExp): void {
  assert.equal(r.code, 2, r.stderr);
  const lines = r.stderr.split('\n').filter((l) => l !== '' && !l.startsWith('{"level":'));
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0] ?? '', /^exec-server: /);
  assert.match(lines[0] ?? '', re);
  assert.doesNotMatch(r.stderr, /\n\s+at /);
}

test('boot errors are one line naming the cause and the fix, exit 2', { timeout: 300_000 }, async () => {
  const holder = serve(['--listen', 'ws://127.0.0.1:0', '--log-level', 'silent']);
  try {
    const deadline = Date.now() + 120_000;
    while (!holder.stdout().includes('\n') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const url = holder.stdout().trim();
    assert.match(url, /^ws:\/\//);
    assertOneLine(await run(['--listen', url]), /port \d+ is already in use.*--listen ws:\/\/127\.0\.0\.1:PORT/);
    assertOneLine(
      await run(['--max-sessions', '-3']),
      /--max-sessions \/ EXEC_SERVER_MAX_SESSIONS: must be at least 1, got -3/,
    );
    assertOneLine(
      await run(['--docker-host', 'foo://x', '--backend', 'docker']),
      /--docker-host: unsupported docker host "foo:\/\/x"; expected unix:\/\/\/path/,
    );
    assertOneLine(await run(['--listen', '--max-sessions']), /unsupported address "--max-sessions"/);
    assertOneLine(
      await run([
        '--backend',
        'docker',
        '--docker-host',
        'unix:///nonexistent/docker.sock',
        '--listen',
        'ws://127.0.0.1:0',
      ]),
      /no Docker engine answers at unix:\/\/\/nonexistent\/docker\.sock.*scripts\/start-dockerd\.sh.*--backend local/,
    );
  } finally {
    holder.child.kill('SIGTERM');
    await holder.exited;
  }
});

test('the default command is serve; --version, -V and --help name the subcommands', { timeout: 120_000 }, async () => {
  const { VERSION } = await import('../../src/version.ts');
  for (const flag of ['--version', '-V']) {
    const r = await run([flag]);
    assert.equal(r.code, 0);
    assert.equal(r.stdout, `exec-server ${VERSION}\n`);
  }
  const help = await run(['--help']);
  assert.equal(help.code, 0);
  for (const sub of ['run', 'shell', 'sessions', 'cp', '--version'])
    assert.match(help.stdout, new RegExp(`exec-server ${sub}`));
  assert.match(help.stdout, /--max-sessions/, 'serve options too');
  const runHelp = await run(['help', 'run']);
  assert.equal(runHelp.code, 0);
  assert.match(runHelp.stdout, /^Usage: exec-server run/);
  // Options without a command are the server's: a bad one is reported as configuration.
  const bad = await run(['--max-processes', 'many']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /invalid configuration: --max-processes/);
});

test('--log-format pretty writes readable lines; requests are logged at debug only', { timeout: 300_000 }, async () => {
  for (const [level, expectRequests] of [
    ['info', false],
    ['debug', true],
  ] as const) {
    const s = serve(['--listen', 'ws://127.0.0.1:0', '--log-format', 'pretty', '--log-level', level]);
    try {
      const deadline = Date.now() + 120_000;
      while (!s.stdout().includes('\n') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      const base = s.stdout().trim().replace(/^ws:/, 'http:');
      assert.match(base, /^http:\/\/127\.0\.0\.1:\d+$/, s.stderr());
      for (let i = 0; i < 3; i++) assert.equal((await fetch(`${base}/healthz`)).status, 200);
      const created = await fetch(`${base}/v1/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      assert.equal(created.status, 201);
    } finally {
      s.child.kill('SIGTERM');
    }
    assert.equal(await s.exited, 0);
    const lines = s.stderr().split('\n').filter(Boolean);
    assert.ok(
      lines.every((l) => !l.startsWith('{')),
      `no JSON lines:\n${s.stderr()}`,
    );
    assert.ok(
      lines.some((l) => /INFO.*session created/.test(l)),
      s.stderr(),
    );
    const requestLines = lines.filter((l) => /DEBUG.*request/.test(l) && l.includes('/healthz'));
    assert.equal(requestLines.length, expectRequests ? 3 : 0, s.stderr());
  }
});
