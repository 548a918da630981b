/**
 * The audit log against a real server (local backend): each action appears once with who did
 * it, no token or secret value reaches the file, `audit verify` passes on it and names the
 * first broken line of a copy with one byte changed, a line removed or two lines swapped; a log
 * that cannot be written makes the server not ready and shows in the metrics. Restarts: after a
 * SIGKILL with a long last line, after a line torn by a crash; a second server on the same log
 * refuses to start and writes nothing to it.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, readFile, stat, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { MAX_LINE_BYTES } from '../../src/audit/line-bound.ts';
import { verifyText } from '../../src/audit/verify.ts';
import { RpcConnection } from '../../src/client/rpc-connection.ts';
import type { ExecToolResult, SessionInfo, SessionToken } from '../../src/protocol/index.ts';
import { startServer } from '../support/harness.ts';
import { auditVerify } from './audit-cli.ts';
import { type ExecAnswer, newSession, requestJson, serverWithApi } from '../http/helpers.ts';

const ACME = 'tenant-secret-acme';
const ENV_SECRET = 'sk-live-do-not-log-4242';
const ROOT = new URL('../..', import.meta.url).pathname;

interface Line {
  seq: number;
  time: string;
  tenant: string | null;
  principal: string;
  remote: string | null;
  session: string | null;
  action: string;
  detail: Record<string, unknown>;
  prev: string | null;
}

test('every action appears once, without secrets; verify passes and finds edits, removals and swaps', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'audit-test-'));
  const path = join(dir, 'audit.jsonl');
  const api = await serverWithApi(t, { flags: ['--tokens', `acme:${ACME}`, '--audit-log', path] }, ACME);
  const id = await newSession(api, {
    approvalPolicy: 'on-failure',
    sandbox: { type: 'workspace-write', excludeSlashTmp: true },
    env: { API_KEY: ENV_SECRET },
  });
  const workdir = (await api<SessionInfo>('GET', `/v1/sessions/${id}`)).body.workdir;
  // A sandbox denial, its verdict, the approval asked and given, the unsandboxed retry.
  const outside = join(workdir, '..', `outside-${Date.now()}.txt`);
  const r = await api<ExecAnswer>('POST', `/v1/sessions/${id}/exec_command`, {
    login: false,
    cmd: `echo escaped > ${outside} && echo wrote`,
    yield_time_ms: 2000,
  });
  assert.equal(r.status, 202, JSON.stringify(r.body));
  const decided = await api<ExecToolResult>('POST', `/v1/sessions/${id}/approvals/${r.body.approval_id}`, {
    decision: 'approved',
  });
  assert.equal(decided.status, 200);
  // WebSocket: a process with stdin.
  const conn = await RpcConnection.open(api.server.url, { token: ACME });
  t.after(() => conn.close());
  await conn.request('initialize', { clientName: 't', resumeSessionId: id });
  conn.notify('initialized', {});
  await conn.request('process/start', {
    processId: 'cat1',
    argv: ['cat'],
    pipeStdin: true,
    env: { DB_PASSWORD: `${ENV_SECRET}-db` },
  });
  // A sandboxed command failing on its own inside the window: a verdict, not a denial.
  await conn.request('process/start', { processId: 'fails', argv: ['sh', '-c', 'exit 7'] });
  await conn.request('process/write', { processId: 'cat1', chunk: Buffer.from('hello\n').toString('base64') });
  await conn.request('process/closeStdin', { processId: 'cat1' });
  // Files: an upload, a write, a delete.
  const up = await fetch(`${api.server.httpUrl}/v1/sessions/${id}/files/content?path=${workdir}/up.txt`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${ACME}`, 'content-type': 'application/octet-stream' },
    body: '12345',
  });
  assert.equal(up.status, 200);
  await conn.request('fs/writeFile', { path: `${workdir}/w.txt`, dataBase64: Buffer.from('abc').toString('base64') });
  assert.equal((await api('DELETE', `/v1/sessions/${id}/files?path=${workdir}/up.txt`)).status, 200);
  // Tokens: created, used where refused, revoked; a wrong tenant token.
  const tok = (await api<SessionToken>('POST', `/v1/sessions/${id}/tokens`, { access: 'read' })).body;
  assert.equal((await api('GET', '/v1/sessions', undefined, tok.token)).status, 403);
  assert.equal((await api('DELETE', `/v1/sessions/${id}/tokens/${tok.tokenId}`)).status, 204);
  assert.equal((await api('GET', '/v1/sessions', undefined, 'wrong-token')).status, 401);
  await new Promise((res) => setTimeout(res, 300));
  assert.equal((await api('DELETE', `/v1/sessions/${id}`)).status, 204);
  await conn.close();
  await api.server.close();

  const text = await readFile(path, 'utf8');
  const lines = text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Line);
  const of = (action: string, where: (l: Line) => boolean = () => true) =>
    lines.filter((l) => l.action === action && where(l));
  const once = (action: string, where?: (l: Line) => boolean): Line => {
    const found = of(action, where);
    assert.equal(found.length, 1, `${action}: ${JSON.stringify(found)}`);
    return found[0]!;
  };
  assert.equal(lines[0]?.action, 'audit.start');
  assert.equal(lines[0]?.prev, null);
  assert.equal(lines.at(-1)?.action, 'audit.stop');
  const created = once('session.create');
  assert.equal(created.principal, 'tenant:acme');
  assert.equal(created.tenant, 'acme');
  assert.equal(created.remote, '127.0.0.1');
  assert.equal(created.session, id);
  assert.deepEqual(created.detail['env'], { API_KEY: '[redacted]' });
  once('denial.verdict', (l) => l.detail['outcome'] === 'denied-retried');
  assert.equal(once('denial.verdict', (l) => l.detail['processId'] === 'fails').detail['outcome'], 'not-denied');
  const decide = once('approval.decide');
  assert.equal(decide.detail['approvalId'], r.body.approval_id);
  assert.equal(decide.principal, 'tenant:acme');
  const approval = once('approval');
  assert.equal(approval.detail['purpose'], 'sandbox-retry');
  assert.equal(approval.detail['decision'], 'approved');
  const starts = of('process.start', (l) => String((l.detail['argv'] as string[]).at(-1)).includes('escaped'));
  assert.deepEqual(
    starts.map((l) => l.detail['sandboxed']),
    [true, false],
    'the sandboxed attempt, then the approved retry',
  );
  const cat = once('process.start', (l) => l.detail['processId'] === 'cat1');
  assert.deepEqual(cat.detail['argv'], ['cat']);
  assert.deepEqual(cat.detail['env'], { DB_PASSWORD: '[redacted]' });
  assert.equal(cat.detail['tty'], false);
  assert.equal(cat.detail['cwd'], workdir);
  const exit = once('process.exit', (l) => l.detail['processId'] === 'cat1');
  assert.equal(exit.detail['exitCode'], 0);
  assert.equal(typeof exit.detail['durationMs'], 'number');
  assert.equal(exit.principal, 'tenant:acme', "the exit carries its starter's principal");
  assert.equal(once('process.stdin').detail['bytes'], 6);
  assert.equal(once('file.write', (l) => l.detail['path'] === `${workdir}/up.txt`).detail['size'], 5);
  assert.equal(once('file.write', (l) => l.detail['path'] === `${workdir}/w.txt`).detail['size'], 3);
  once('file.delete', (l) => l.detail['path'] === `${workdir}/up.txt`);
  assert.equal(once('token.create').detail['tokenId'], tok.tokenId);
  assert.equal(once('token.revoke').detail['tokenId'], tok.tokenId);
  const denied = once('auth.denied');
  assert.equal(denied.principal, `session-token:${tok.tokenId}`);
  assert.equal(denied.detail['code'], 'EXEC_ERR_TOKEN_SCOPE');
  const failed = once('auth.failure');
  assert.equal(failed.principal, 'anonymous');
  assert.equal(failed.detail['code'], 'EXEC_ERR_UNAUTHORIZED');
  assert.equal(once('session.delete').detail['why'], 'deleted');
  // No token, tenant secret or environment value anywhere.
  for (const secret of [ACME, ENV_SECRET, `${ENV_SECRET}-db`, tok.token, 'wrong-token', 'est1.'])
    assert.ok(!text.includes(secret), `the log contains ${secret}`);

  // The chain: intact, then three kinds of tampering, each named at its first broken line.
  assert.deepEqual(verifyText(text).ok, true);
  const ok = auditVerify(path);
  assert.equal(ok.status, 0, ok.out);
  const raw = text.split('\n').slice(0, -1);
  const k = 5; // 0-based index of a line in the middle
  const variants: Array<[string, string[], RegExp]> = [
    ['one byte changed', raw.map((l, i) => (i === k ? l.replace('"seq":', '"seq" :') : l)), /line 6 was edited/],
    ['a line removed', raw.filter((_, i) => i !== k), /removed before line 6/],
    [
      'two lines swapped',
      raw.map((l, i) => (i === k ? raw[k + 1]! : i === k + 1 ? raw[k]! : l)),
      /line 6 is out of order/,
    ],
  ];
  for (const [what, broken, message] of variants) {
    const copy = join(dir, `${what.replace(/ /g, '-')}.jsonl`);
    await writeFile(copy, `${broken.join('\n')}\n`);
    const result = auditVerify(copy);
    assert.equal(result.status, 1, `${what}: ${result.out}`);
    assert.match(result.out, message, what);
  }
  // A byte changed inside a value (the JSON still parses): the next line no longer chains.
  const flipped = raw.map((l, i) =>
    i === k ? l.replace(/"time":"(\d)/, (_m, d: string) => `"time":"${(Number(d) + 1) % 10}`) : l,
  );
  assert.match(verifyText(`${flipped.join('\n')}\n`).problem ?? '', /line 6 was edited/);
});

test('a restarted server appends: its chain goes on from the last line', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'audit-test-'));
  const path = join(dir, 'audit.jsonl');
  for (let i = 0; i < 2; i++) {
    const api = await serverWithApi(t, { flags: ['--audit-log', path] });
    await newSession(api);
    await api.server.close();
  }
  const result = verifyText(await readFile(path, 'utf8'));
  assert.equal(result.ok, true, result.problem);
  const starts = (await readFile(path, 'utf8')).split('\n').filter((l) => l.includes('"audit.start"'));
  assert.equal(starts.length, 2);
});

test('a log that cannot be written: not ready, metrics, and a bounded queue that counts what it drops', async (t) => {
  const server = await startServer({ flags: ['--audit-log', '/dev/full', '--audit-queue-lines', '16'] });
  t.after(() => server.close());
  for (let i = 0; i < 40; i++) await requestJson(`${server.httpUrl}/v1/sessions`, 'POST', {});
  const ready = await requestJson<{ code: string; message: string }>(`${server.httpUrl}/readyz`, 'GET');
  assert.equal(ready.status, 503);
  assert.match(ready.body.message, /audit log/);
  const metrics = await (await fetch(`${server.httpUrl}/metrics`)).text();
  assert.match(metrics, /exec_server_audit_healthy 0/);
  assert.match(metrics, /exec_server_audit_write_errors_total [1-9]/);
  assert.match(metrics, /exec_server_audit_dropped_total [1-9]/);
});

test('an audit log path that cannot be opened stops the server at boot', async () => {
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', 'src/main.ts', '--listen', 'ws://127.0.0.1:0', '--audit-log', '/nonexistent-dir/audit.jsonl'],
    { cwd: ROOT, encoding: 'utf8', timeout: 60_000 },
  );
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /audit/i);
});

test('--audit-log -: the address stays the first line of standard output, the chain follows it', async () => {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', 'src/main.ts', '--listen', 'ws://127.0.0.1:0', '--audit-log', '-', '--log-level', 'warn'],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
  });
  const exited = new Promise((r) => child.once('exit', r));
  for (let i = 0; i < 600 && !out.includes('\n'); i++) await new Promise((r) => setTimeout(r, 100));
  const url = out.split('\n')[0] ?? '';
  assert.match(url, /^ws:\/\/127\.0\.0\.1:\d+$/);
  const created = await requestJson(`${url.replace('ws:', 'http:')}/v1/sessions`, 'POST', {});
  assert.equal(created.status, 201);
  child.kill('SIGTERM');
  await exited;
  const [first, ...rest] = out.split('\n');
  assert.equal(first, url);
  const log = rest.join('\n');
  assert.equal(verifyText(log).ok, true, verifyText(log).problem);
  assert.match(log, /"action":"session.create"/);
});

/** `exec-server` as its own process (so it can be killed), with its address once it listens. */
async function serverProcess(
  args: readonly string[],
): Promise<{ url: string; kill(signal: NodeJS.Signals): Promise<void> }> {
  const root = await mkdtemp(join(tmpdir(), 'audit-ws-'));
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      'src/main.ts',
      '--listen',
      'ws://127.0.0.1:0',
      '--workspace-root',
      root,
      '--log-level',
      'error',
      ...args,
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const exited = new Promise((r) => child.once('exit', r));
  let out = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
  });
  for (let i = 0; i < 600 && !out.includes('\n'); i++) await new Promise((r) => setTimeout(r, 100));
  const url = out.split('\n')[0] ?? '';
  assert.match(url, /^ws:\/\/127\.0\.0\.1:\d+$/);
  return {
    url,
    kill: async (signal) => {
      child.kill(signal);
      await exited;
    },
  };
}

test('a restart after a SIGKILL chains onto a long last line: every line is bounded, long strings cut', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'audit-test-'));
  const path = join(dir, 'audit.jsonl');
  const first = await serverProcess(['--audit-log', path]);
  const conn = await RpcConnection.open(first.url, {});
  await conn.request('initialize', { clientName: 't' });
  conn.notify('initialized', {});
  const big = 'x'.repeat(100_000);
  await conn.request('process/start', { processId: 'big', argv: ['sh', '-c', 'sleep 5', big, big, big] });
  await new Promise((r) => setTimeout(r, 300));
  await first.kill('SIGKILL');
  await conn.close().catch(() => undefined);
  const before = (await readFile(path, 'utf8')).trim().split('\n');
  const start = JSON.parse(before.at(-1)!) as Line;
  assert.equal(start.action, 'process.start', 'the long line is the last one');
  assert.match(String((start.detail['argv'] as string[])[3]), /^x+…\[cut \d+ bytes\]$/);
  assert.equal((start.detail['cut'] as { strings: number }).strings, 3);
  const second = await serverProcess(['--audit-log', path]);
  await second.kill('SIGTERM');
  const text = await readFile(path, 'utf8');
  for (const line of text.trim().split('\n')) assert.ok(Buffer.byteLength(line) <= MAX_LINE_BYTES);
  const result = auditVerify(path);
  assert.equal(result.status, 0, result.out);
  const restart = JSON.parse(text.trim().split('\n')[before.length]!) as Line;
  assert.equal(restart.action, 'audit.start');
  assert.equal(restart.seq, start.seq + 1);
});

test('a torn last line: the restarted server declares it on a line of its own, and verify passes it as a crash', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'audit-test-'));
  const path = join(dir, 'audit.jsonl');
  await (await serverWithApi(t, { flags: ['--audit-log', path] })).server.close();
  await truncate(path, (await stat(path)).size - 15);
  const torn = auditVerify(path);
  assert.equal(torn.status, 1);
  assert.match(torn.out, /line 2 is incomplete/);
  await (await serverWithApi(t, { flags: ['--audit-log', path] })).server.close();
  const lines = (await readFile(path, 'utf8')).split('\n');
  const restart = JSON.parse(lines[2]!) as Line;
  assert.equal(restart.action, 'audit.start');
  assert.equal(restart.seq, 1);
  assert.deepEqual(Object.keys(restart.detail['torn'] as object), ['bytes', 'sha256']);
  const ok = auditVerify(path);
  assert.equal(ok.status, 0, ok.out);
  assert.match(ok.out, /line 2: torn by a crash/);
  // Any other edit still fails: here one byte of the torn line.
  await writeFile(path, lines.map((l, i) => (i === 1 ? l.replace('"', "'") : l)).join('\n'));
  assert.equal(auditVerify(path).status, 1);
});

test('a second server on the same log refuses to start, whatever its port, and writes nothing to it', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'audit-test-'));
  const path = join(dir, 'audit.jsonl');
  const api = await serverWithApi(t, { flags: ['--audit-log', path] });
  const port = new URL(api.server.url).port;
  for (const listen of [`ws://127.0.0.1:${port}`, 'ws://127.0.0.1:0']) {
    const r = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'src/main.ts', '--listen', listen, '--audit-log', path, '--log-level', 'error'],
      { cwd: ROOT, encoding: 'utf8', timeout: 30_000 },
    );
    assert.equal(r.status, 2, `${listen}: ${r.stdout}${r.stderr}`);
    assert.match(
      r.stderr,
      new RegExp(`audit log ${path} has one writer: another server writes it \\(pid ${process.pid},`),
    );
  }
  await newSession(api);
  await api.server.close();
  const text = await readFile(path, 'utf8');
  assert.equal(text.match(/"audit\.start"/g)?.length, 1, text);
  const result = auditVerify(path);
  assert.equal(result.status, 0, result.out);
});
