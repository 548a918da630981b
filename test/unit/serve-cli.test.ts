/** `npm start` behaviour: the one stdout line, clear config errors, token never logged. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';

const main = fileURLToPath(new URL('../../src/main.ts', import.meta.url));

function serve(args: string[], env: NodeJS.ProcessEnv = {}): { child: ReturnType<typeof spawn>; stdout: () => string; stderr: () => string; exited: Promise<number | null> } {
  const child = spawn(process.execPath, ['--import', 'tsx', main, 'serve', ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += String(d)));
  child.stderr.on('data', (d) => (err += String(d)));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, stdout: () => out, stderr: () => err, exited };
}

test('prints exactly one ws:// line once bound, serves it, shuts down on SIGTERM, never logs the token', { timeout: 60_000 }, async () => {
  const s = serve(['--listen', 'ws://127.0.0.1:0', '--log-level', 'debug'], { EXEC_SERVER_TOKEN: 'top-secret-token' });
  const deadline = Date.now() + 30_000;
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

test('bad configuration exits 2 with a clear message', { timeout: 30_000 }, async () => {
  const s = serve(['--listen', 'ws://0.0.0.0:0']);
  assert.equal(await s.exited, 2);
  assert.match(s.stderr(), /invalid configuration: refusing to listen on non-loopback address 0\.0\.0\.0 without a token/);
  const t = serve(['--max-processes', 'many']);
  assert.equal(await t.exited, 2);
  assert.match(t.stderr(), /--max-processes \/ EXEC_SERVER_MAX_PROCESSES: expected an integer/);
});
