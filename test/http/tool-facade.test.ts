import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { TestSession } from '../support/harness.ts';
import type { ApprovalRequired, ExecToolResult, SessionInfo } from '../../src/protocol/index.ts';
import { newSession, serverWithApi, TEXT_RE, type Api, type ExecAnswer } from './helpers.ts';

const exec = (api: Api, id: string, args: Record<string, unknown>) =>
  api<ExecAnswer>('POST', `/v1/sessions/${id}/exec_command`, { login: false, ...args });
const write = (api: Api, id: string, args: Record<string, unknown>) =>
  api<ExecAnswer>('POST', `/v1/sessions/${id}/write_stdin`, args);

test('exec_command: a short command answers its exit code, output and the Codex text block', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api);
  const r = await exec(api, id, { cmd: 'echo hello; echo err >&2; exit 3' });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.exit_code, 3);
  assert.equal(r.body.session_id, undefined);
  assert.equal(r.body.output, 'hello\nerr\n');
  assert.equal(r.body.original_token_count, 3);
  assert.match(r.body.chunk_id, /^[0-9a-f]{6}$/);
  const m = TEXT_RE.exec(r.body.text);
  assert.ok(m, r.body.text);
  assert.equal(m[1], r.body.chunk_id);
  assert.equal(Number(m[2]), r.body.wall_time_seconds);
  assert.equal(m[3], '3');
  assert.equal(m[6], 'hello\nerr\n');
  // The default yield (10 s) does not hold back a command that ends sooner.
  const quick = await exec(api, id, { cmd: 'sleep 0.5; echo late' });
  assert.equal(quick.body.exit_code, 0);
  assert.ok(quick.body.wall_time_seconds < 5, `${quick.body.wall_time_seconds}`);
  // The login shell is the default (-lc); workdir joins the workspace.
  await exec(api, id, { cmd: 'mkdir -p sub/dir' });
  const wd = await exec(api, id, { cmd: 'pwd', workdir: 'sub/dir' });
  assert.match(wd.body.output, /\/sub\/dir\n$/);
});

test('exec_command: yield is clamped to at least 250 ms; a running command gets a numeric session_id; write_stdin polls it', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api);
  const started = Date.now();
  const r = await exec(api, id, { cmd: 'echo first; sleep 1.2; echo done', yield_time_ms: 0 });
  const took = Date.now() - started;
  assert.equal(r.status, 200);
  assert.equal(r.body.exit_code, undefined);
  const sid = r.body.session_id ?? Number.NaN;
  assert.ok(Number.isInteger(sid) && sid >= 1000 && sid < 100_000, String(sid));
  assert.ok(r.body.wall_time_seconds >= 0.24 && took < 1100, `wall ${r.body.wall_time_seconds}, took ${took}`);
  assert.match(r.body.text, new RegExp(`\\nProcess running with session ID ${r.body.session_id}\\n`));
  // `first` is printed at once, but a loaded machine may start the command later than 250 ms:
  // what the first call missed, the poll gets (every byte once, in order).
  assert.ok(['first\n', ''].includes(r.body.output), JSON.stringify(r.body.output));
  // An empty write_stdin is a poll: clamped to >= 5 s, but it returns when the process exits.
  const poll = await write(api, id, { session_id: r.body.session_id, chars: '', yield_time_ms: 10 });
  assert.equal(poll.status, 200);
  assert.equal(poll.body.exit_code, 0, JSON.stringify(poll.body));
  assert.equal(r.body.output + poll.body.output, 'first\ndone\n');
  assert.ok(poll.body.wall_time_seconds < 4, `${poll.body.wall_time_seconds}`);
  // The id is released once the exit was reported.
  const gone = await write(api, id, { session_id: r.body.session_id, chars: '' });
  assert.equal(gone.status, 404);
  assert.equal(gone.body.code, 'EXEC_ERR_PROCESS_NOT_FOUND');
  assert.equal(gone.body.message, `Unknown process id ${r.body.session_id}`);
});

test('write_stdin: an empty poll waits at least 5 s; a write waits its own (short) yield', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api);
  const r = await exec(api, id, { cmd: 'sleep 30', yield_time_ms: 250 });
  const sid = r.body.session_id as number;
  const t0 = Date.now();
  const poll = await write(api, id, { session_id: sid, yield_time_ms: 250 });
  const waited = Date.now() - t0;
  assert.equal(poll.status, 200);
  assert.equal(poll.body.session_id, sid);
  assert.ok(waited >= 4900 && waited < 9000, `poll waited ${waited} ms`);
  assert.ok(poll.body.wall_time_seconds >= 4.9);
  // A pipe command has no stdin: chars are refused (Codex's message), "\u0003" interrupts.
  const refused = await write(api, id, { session_id: sid, chars: 'x' });
  assert.equal(refused.status, 400);
  assert.equal(
    refused.body.message,
    'stdin is closed for this session; rerun exec_command with tty=true to keep stdin open',
  );
  const interrupted = await write(api, id, { session_id: sid, chars: '\u0003', yield_time_ms: 2000 });
  assert.equal(interrupted.body.exit_code, 130);
});

test('tty: write_stdin feeds the terminal; output uses CRLF', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api);
  const r = await exec(api, id, { cmd: 'read -r x; echo "got:$x"; stty size', tty: true, yield_time_ms: 500 });
  assert.ok(r.body.session_id, JSON.stringify(r.body));
  const w = await write(api, id, { session_id: r.body.session_id, chars: 'abc\n', yield_time_ms: 3000 });
  assert.equal(w.body.exit_code, 0, JSON.stringify(w.body));
  assert.match(w.body.output, /got:abc\r\n24 80\r\n/);
});

test('max_output_tokens truncates the middle (4 bytes per token) and original_token_count counts everything', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api);
  const r = await exec(api, id, { cmd: "head -c 100000 /dev/zero | tr '\\0' a; printf END", max_output_tokens: 100 });
  assert.equal(r.body.exit_code, 0);
  assert.equal(r.body.original_token_count, 25001);
  const expected = `Warning: truncated output (original token count: 25001)\nTotal output lines: 1\n\n${'a'.repeat(200)}…24901 tokens truncated…${'a'.repeat(197)}END`;
  assert.equal(r.body.output, expected);
  assert.ok(r.body.text.endsWith(`Original token count: 25001\nOutput:\n${expected}`));
  // Default budget: 10 000 tokens (40 000 bytes).
  const d = await exec(api, id, { cmd: "head -c 50000 /dev/zero | tr '\\0' b" });
  assert.match(d.body.output, /^Warning: truncated output \(original token count: 12500\)\n/);
  assert.match(d.body.output, /…2500 tokens truncated…/);
});

test('the 1 MiB head/tail buffer keeps the first and last 512 KiB and says what it dropped', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api);
  const r = await exec(api, id, {
    cmd: "printf START; sleep 0.3; head -c 3145728 /dev/zero | tr '\\0' c; printf END",
    max_output_tokens: 10_000_000,
    yield_time_ms: 20_000,
  });
  assert.equal(r.body.exit_code, 0);
  const out = r.body.output as string;
  const marker = '\n... 2097160 bytes omitted ...\n';
  assert.ok(out.startsWith('START'));
  assert.ok(out.endsWith('END'));
  assert.ok(out.includes(marker));
  assert.equal(out.length, 1024 * 1024 + marker.length);
});

test('a sandbox denial answers the exit code and output, no session_id', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api, { sandbox: { type: 'read-only' } });
  const r = await exec(api, id, { cmd: 'echo data > note.txt' });
  assert.equal(r.status, 200);
  assert.equal(r.body.exit_code, 1);
  assert.equal(r.body.session_id, undefined);
  assert.equal(r.body.sandbox_denied, true);
  assert.match(r.body.output, /Read-only file system/);
  assert.match(r.body.text, /Process exited with code 1\n/);
});

test('approvals over HTTP: approval_required, then the follow-up decides and returns the original result', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api, { approvalPolicy: 'untrusted' });
  const workdir = (await api<SessionInfo>('GET', `/v1/sessions/${id}`)).body.workdir;
  const r = await exec(api, id, { cmd: 'echo approved-run > marker; cat marker' });
  assert.equal(r.status, 202, JSON.stringify(r.body));
  assert.equal(r.body.status, 'approval_required');
  assert.match(r.body.approval_id ?? '', /^appr_/);
  assert.ok(r.body.approval);
  assert.equal(r.body.approval.purpose, 'initial');
  assert.deepEqual(r.body.approval.argv.slice(1), ['-c', 'echo approved-run > marker; cat marker']);
  assert.equal(existsSync(join(workdir, 'marker')), false, 'nothing runs before the approval');
  const pending = await api<{ approvals: ApprovalRequired['approval'][] }>('GET', `/v1/sessions/${id}/approvals`);
  assert.deepEqual(
    pending.body.approvals.map((a) => a.id),
    [r.body.approval_id],
  );
  const decided = await api<ExecToolResult>('POST', `/v1/sessions/${id}/approvals/${r.body.approval_id}`, {
    decision: 'approved',
  });
  assert.equal(decided.status, 200, JSON.stringify(decided.body));
  assert.equal(decided.body.exit_code, 0);
  assert.equal(decided.body.output, 'approved-run\n');
  const twice = await api<ExecToolResult>('POST', `/v1/sessions/${id}/approvals/${r.body.approval_id}`, {
    decision: 'approved',
  });
  assert.equal(twice.status, 404);
  assert.equal(twice.body.code, 'EXEC_ERR_APPROVAL_NOT_FOUND');

  const denied = await exec(api, id, { cmd: 'touch denied-marker' });
  assert.equal(denied.status, 202);
  const no = await api('POST', `/v1/sessions/${id}/approvals/${denied.body.approval_id}`, { decision: 'denied' });
  assert.equal(no.status, 403);
  assert.equal(no.body.code, 'EXEC_ERR_REJECTED');
  assert.equal(no.body.message, 'exec command rejected by user');
  assert.equal(existsSync(join(workdir, 'denied-marker')), false, 'a denied command never runs');
});

test('approvals over HTTP: a sandbox-retry approval pauses the call and the retry result comes back', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api, {
    approvalPolicy: 'on-failure',
    sandbox: { type: 'workspace-write', excludeSlashTmp: true },
  });
  const workdir = (await api<SessionInfo>('GET', `/v1/sessions/${id}`)).body.workdir;
  const outside = join(workdir, '..', `outside-${Date.now()}.txt`);
  const r = await exec(api, id, { cmd: `echo escaped > ${outside} && echo wrote`, yield_time_ms: 2000 });
  assert.equal(r.status, 202, JSON.stringify(r.body));
  assert.equal(r.body.approval?.purpose, 'sandbox-retry');
  const decided = await api<ExecToolResult>('POST', `/v1/sessions/${id}/approvals/${r.body.approval_id}`, {
    decision: 'approved',
  });
  assert.equal(decided.status, 200, JSON.stringify(decided.body));
  assert.equal(decided.body.exit_code, 0);
  assert.equal(decided.body.output, 'wrote\n', "the denied attempt's output is not shown");
  assert.equal(existsSync(outside), true);
});

test('approvals: an attached WebSocket client is asked first', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api, { approvalPolicy: 'untrusted' });
  const asked: unknown[] = [];
  const ws = await TestSession.open(
    api.server.url,
    { resumeSessionId: id },
    {
      onServerRequest: (_method, params) => {
        asked.push(params);
        return { decision: 'approved' };
      },
    },
  );
  t.after(() => ws.close());
  const r = await exec(api, id, { cmd: 'echo via-ws' });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.output, 'via-ws\n');
  assert.equal(asked.length, 1);
});

test("require_escalated under a policy that forbids it is rejected with Codex's text; nothing runs", async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api, { approvalPolicy: 'never' });
  const r = await exec(api, id, { cmd: 'touch escalated-marker', sandbox_permissions: 'require_escalated' });
  assert.equal(r.status, 403);
  assert.equal(r.body.code, 'EXEC_ERR_REJECTED');
  assert.equal(
    r.body.message,
    'approval policy is Never; reject command — you cannot ask for escalated permissions if the approval policy is Never',
  );
  const workdir = (await api<SessionInfo>('GET', `/v1/sessions/${id}`)).body.workdir;
  assert.equal(existsSync(join(workdir, 'escalated-marker')), false);
});

test('the process limit: warning from 60 kept processes, pruning of the least recently used past 64', {
  timeout: 240_000,
}, async (t) => {
  const api = await serverWithApi(t, { noBubblewrap: true, flags: ['--max-processes', '128'] });
  const id = await newSession(api, { sandbox: { type: 'danger-full-access' } });
  const ids: number[] = [];
  const warnings: Array<string | undefined> = [];
  for (let batch = 0; batch < 8; batch++) {
    const answers = await Promise.all(
      Array.from({ length: 8 }, () => exec(api, id, { cmd: 'sleep 600', yield_time_ms: 250 })),
    );
    for (const a of answers) {
      assert.equal(a.status, 200, JSON.stringify(a.body));
      assert.ok(a.body.session_id !== undefined, 'still running');
      ids.push(a.body.session_id);
      warnings.push(a.body.warning);
    }
  }
  assert.equal(new Set(ids).size, 64);
  assert.equal(warnings.filter((w) => w !== undefined).length, 5, 'warned at 60..64 kept processes');
  assert.ok(warnings.some((w) => w?.includes('you currently have 64 processes open')));
  // Touch the first one so it is protected; the next least recently used gets pruned.
  const first = ids[0]!;
  await write(api, id, { session_id: first, chars: '', yield_time_ms: 5000 }).then((r) =>
    assert.equal(r.body.session_id, first),
  );
  const extra = await exec(api, id, { cmd: 'sleep 600', yield_time_ms: 250 });
  assert.equal(extra.status, 200);
  assert.match(extra.body.warning ?? '', /you currently have 64 processes open/);
  const stillThere = await Promise.all(ids.map((sid) => write(api, id, { session_id: sid, chars: '\u0001x' })));
  const missing = ids.filter((_, i) => stillThere[i]!.status === 404);
  assert.equal(missing.length, 1, 'exactly one process was pruned');
  assert.notEqual(missing[0], first, 'a recently used process is protected');
  assert.equal((await api<SessionInfo>('GET', `/v1/sessions/${id}`)).body.runningProcesses, 64);
  await api('DELETE', `/v1/sessions/${id}`);
});
