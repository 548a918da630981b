/**
 * What a server answered before it was SIGKILLed is there after a restart with
 * the same instance id. The kill comes the moment the answer is read (no grace for background
 * work), which is what a real crash right after an answer looks like.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { requestJson, createSession } from '../http/helpers.ts';
import { type DevServer, startDevServer } from '../support/dev-server.ts';
import { readToEnd, sleep, TestSession } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';

import { docker, removeInstanceContainers } from './helpers.ts';
import { sessionOfContainer } from '../../src/backends/docker/fleet.ts';
import type { ContainerInfo } from 'dockerode';
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

const TOKEN = 'crash-tok';
const FLAGS = ['--token', TOKEN];
const flagsOf = new Map<string, string[]>();

interface Info {
  sessionId: string;
  labels?: Record<string, string>;
  sandbox?: { type: string };
  approvalPolicy?: string;
}

const servers = new Map<string, DevServer[]>();

async function server(instanceId: string): Promise<DevServer> {
  const s = await startDevServer({ image: TEST_IMAGE, instanceId, flags: flagsOf.get(instanceId) ?? FLAGS });
  servers.get(instanceId)?.push(s);
  return s;
}

/** A fresh instance id; its servers are killed, then its containers removed, after the test. */
function instance(t: TestContext, name: string): string {
  const id = `crash-${name}-${process.pid}-${Date.now()}`;
  servers.set(id, []);
  t.after(async () => {
    for (const s of servers.get(id) ?? []) await s.kill();
    await removeInstanceContainers(id);
  });
  return id;
}

const SPEC = {
  labels: { owner: 'crash' },
  sandbox: { type: 'read-only' },
  approvalPolicy: 'never',
};

/** A fresh instance (see `instance`), a server of it, and a session made there from `spec`. */
async function withSession(
  t: TestContext,
  name: string,
  spec: object = {},
): Promise<{ instanceId: string; srv: DevServer; id: string }> {
  const instanceId = instance(t, name);
  const srv = await server(instanceId);
  const made = await createSession(srv, spec, TOKEN);
  return { instanceId, srv, id: made.sessionId };
}

test('a session answered 201 is there after a SIGKILL right after the answer', dockerTestOptions, async (t) => {
  const instanceId = instance(t, 'create');
  const made: string[] = [];
  for (let round = 0; round < 3; round++) {
    const first = await server(instanceId);
    const res = await requestJson<Info>(`${first.http}/v1/sessions`, 'POST', SPEC, TOKEN);
    await first.kill();
    assert.equal(res.status, 201, JSON.stringify(res.body));
    made.push(res.body.sessionId);
  }
  const second = await server(instanceId);
  for (const id of made) {
    const got = await requestJson<Info>(`${second.http}/v1/sessions/${id}`, 'GET', undefined, TOKEN);
    assert.equal(got.status, 200, `session ${id} answered 201 before the crash: ${JSON.stringify(got.body)}`);
    assert.deepEqual(got.body.labels, SPEC.labels);
    assert.equal(got.body.sandbox?.type, 'read-only');
    assert.equal(got.body.approvalPolicy, 'never');
  }
});

test('a batch answered 201 is there after a SIGKILL right after the answer', dockerTestOptions, async (t) => {
  const instanceId = instance(t, 'batch');
  const first = await server(instanceId);
  const res = await requestJson<{ sessions: Info[] }>(`${first.http}/v1/sessions?count=3`, 'POST', SPEC, TOKEN);
  await first.kill();
  assert.equal(res.status, 201, JSON.stringify(res.body));
  const second = await server(instanceId);
  for (const { sessionId } of res.body.sessions) {
    const got = await requestJson<Info>(`${second.http}/v1/sessions/${sessionId}`, 'GET', undefined, TOKEN);
    assert.equal(got.status, 200, `session ${sessionId} answered 201 before the crash: ${JSON.stringify(got.body)}`);
    assert.deepEqual(got.body.labels, SPEC.labels);
  }
});

test(
  'a process start, a file write and a revocation answered are there after a SIGKILL',
  dockerTestOptions,
  async (t) => {
    let { instanceId, srv, id } = await withSession(t, 'answers');
    const mint = async (): Promise<{ token: string; tokenId: string }> => {
      const r = await requestJson<{ token: string; tokenId: string }>(
        `${srv.http}/v1/sessions/${id}/tokens`,
        'POST',
        {},
        TOKEN,
      );
      assert.equal(r.status, 201, JSON.stringify(r.body));
      return r.body;
    };
    // Round 1: a token minted, another revoked; the kill right after the 204.
    const kept = await mint();
    const revoked = await mint();
    const del = await requestJson(
      `${srv.http}/v1/sessions/${id}/tokens/${revoked.tokenId}`,
      'DELETE',
      undefined,
      TOKEN,
    );
    await srv.kill();
    assert.equal(del.status, 204);
    srv = await server(instanceId);
    const ok = await requestJson(`${srv.http}/v1/sessions/${id}`, 'GET', undefined, kept.token);
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    const no = await requestJson<{ code: string }>(`${srv.http}/v1/sessions/${id}`, 'GET', undefined, revoked.token);
    assert.equal(no.status, 401, JSON.stringify(no.body));
    assert.equal(no.body.code, 'EXEC_ERR_TOKEN_REVOKED');
    // Round 2: a process started, the kill right after its answer.
    let s = await TestSession.open(srv.url, { resumeSessionId: id }, { token: TOKEN });
    await s.request('process/start', { processId: 'p', argv: ['sh', '-c', 'echo before; sleep 2; echo after'] });
    await srv.kill();
    s.conn.socket.terminate();
    srv = await server(instanceId);
    s = await TestSession.open(srv.url, { resumeSessionId: id }, { token: TOKEN });
    const out = await readToEnd(s, 'p', 0, 60_000);
    assert.equal(out.text, 'before\nafter\n');
    assert.equal(out.exitCode, 0);
    // Round 3: a file written, the kill right after the answer.
    const data = Buffer.from('x'.repeat(100_000)).toString('base64');
    await s.request('fs/writeFile', { path: '/workspace/answered.txt', dataBase64: data });
    await srv.kill();
    s.conn.socket.terminate();
    srv = await server(instanceId);
    s = await TestSession.open(srv.url, { resumeSessionId: id }, { token: TOKEN });
    t.after(() => s.close());
    const read = await s.request<{ dataBase64: string }>('fs/readFile', { path: '/workspace/answered.txt' });
    assert.equal(read.dataBase64, data);
  },
);

test('kills in the middle of creates leave no half state; the audit chain holds', dockerTestOptions, async (t) => {
  const instanceId = instance(t, 'mid');
  const dir = await mkdtemp(join(tmpdir(), 'review-crash-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const auditLog = join(dir, 'audit.jsonl');
  flagsOf.set(instanceId, [...FLAGS, '--audit-log', auditLog]);
  const answered: string[] = [];
  for (const delay of [5, 15, 30, 50, 80, 120, 200]) {
    const srv = await server(instanceId);
    const path = delay % 2 === 0 ? '/v1/sessions?count=2' : '/v1/sessions';
    const pending = requestJson<Info & { sessions?: Info[] }>(`${srv.http}${path}`, 'POST', SPEC, TOKEN).then(
      (r) => r,
      (err: unknown) => err as Error,
    );
    await sleep(delay);
    await srv.kill();
    // The client is not left hanging: an answer or a connection error.
    const r = await Promise.race([pending, sleep(10_000).then(() => 'hung' as const)]);
    assert.notEqual(r, 'hung', `the create killed after ${delay} ms hung`);
    if (r !== 'hung' && !(r instanceof Error) && r.status === 201)
      answered.push(...(r.body.sessions ?? [r.body]).map((i: Info) => i.sessionId));
  }
  const last = await server(instanceId);
  const list = await requestJson<{ sessions: Info[] }>(`${last.http}/v1/sessions`, 'GET', undefined, TOKEN);
  const listed = list.body.sessions.map((i) => i.sessionId);
  for (const id of answered) assert.ok(listed.includes(id), `answered session ${id} is listed`);
  // Every listed session is usable; none has a default policy in place of its own.
  for (const info of list.body.sessions) {
    assert.equal(info.sandbox?.type, 'read-only', JSON.stringify(info));
    const s = await TestSession.open(last.url, { resumeSessionId: info.sessionId }, { token: TOKEN });
    const ran = await s.run('echo', ['echo', 'ok']);
    await s.close();
    assert.equal(ran.stdout, 'ok\n');
  }
  // No container holds a session nobody lists.
  const ids = (await docker('ps', '-aq', '--filter', `label=exec-server.instance=${instanceId}`)).split('\n');
  for (const cid of ids.filter(Boolean)) {
    const [inspect] = JSON.parse(await docker('inspect', cid)) as Array<{
      Name: string;
      Config: { Labels: Record<string, string> };
    }>;
    const c = {
      Id: cid,
      Names: [inspect?.Name ?? ''],
      Labels: inspect?.Config.Labels ?? {},
    } as unknown as ContainerInfo;
    const { sessionId } = sessionOfContainer(c);
    if (sessionId !== undefined)
      assert.ok(listed.includes(sessionId), `container ${cid} holds unlisted session ${sessionId}`);
  }
  // The chain verifies with the CLI, and the last server appended to it.
  await last.stop();
  const verify = spawnSync(process.execPath, ['--import', 'tsx', 'src/main.ts', 'audit', 'verify', auditLog], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  assert.equal(verify.status, 0, verify.stdout + verify.stderr);
  const starts = (await readFile(auditLog, 'utf8')).split('\n').filter((l) => l.includes('"audit.start"'));
  assert.equal(starts.length, 8, 'every server appended to the one chain');
});

test(
  'a client whose server is SIGKILLed mid-command resumes on the next one: every byte once',
  dockerTestOptions,
  async (t) => {
    let { instanceId, srv, id } = await withSession(t, 'stream');
    const s = await TestSession.open(srv.url, { resumeSessionId: id }, { token: TOKEN });
    const script = 'i=0; while [ $i -lt 300 ]; do echo line$i; i=$((i+1)); sleep 0.02; done';
    await s.start('stream', ['sh', '-c', script]);
    const outputs = () => s.eventsOf('stream').filter((n) => n.method === 'process/output');
    await s.waitFor(() => outputs().length >= 20, 30_000, 'some output');
    await srv.kill();
    const before = outputs();
    s.conn.socket.terminate();
    const lastSeq = Math.max(...before.map((n) => n.params['seq'] as number));
    // Meanwhile a client gets a clear error, not a hang.
    const refused = await requestJson(`${srv.http}/v1/sessions/${id}`, 'GET', undefined, TOKEN).catch(
      (e: unknown) => e,
    );
    assert.ok(refused instanceof Error, 'a dead server refuses the connection');
    srv = await server(instanceId);
    const again = await TestSession.open(srv.url, { resumeSessionId: id }, { token: TOKEN });
    t.after(() => again.close());
    const rest = await readToEnd(again, 'stream', lastSeq, 60_000);
    const seqs = [...before.map((n) => n.params['seq'] as number), ...rest.seqs];
    for (let i = 1; i < seqs.length; i++) assert.ok(seqs[i]! > seqs[i - 1]!, `seqs increase: ${seqs.join(',')}`);
    const text =
      Buffer.concat(before.map((n) => Buffer.from(n.params['chunk'] as string, 'base64'))).toString('utf8') + rest.text;
    const want = Array.from({ length: 300 }, (_, i) => `line${i}\n`).join('');
    assert.equal(text, want);
    assert.equal(rest.exitCode, 0);
  },
);

test('an approved-for-session decision is remembered after a SIGKILL', dockerTestOptions, async (t) => {
  let { instanceId, srv, id } = await withSession(t, 'approval', { approvalPolicy: 'untrusted' });
  const asked: string[] = [];
  const answer = (decision: string) => (method: string, params: Record<string, unknown>) => {
    asked.push(`${method} ${JSON.stringify(params['argv'])}`);
    return { decision };
  };
  const s = await TestSession.open(
    srv.url,
    { resumeSessionId: id },
    { token: TOKEN, onServerRequest: answer('approved-for-session') },
  );
  const first = await s.run('a1', ['echo', 'approved']);
  assert.equal(first.stdout, 'approved\n');
  assert.equal(asked.length, 1, 'the first run is asked about');
  // Remembered on this server: not asked again.
  await s.run('a2', ['echo', 'approved']);
  assert.equal(asked.length, 1);
  await srv.kill();
  s.conn.socket.terminate();
  srv = await server(instanceId);
  const again = await TestSession.open(
    srv.url,
    { resumeSessionId: id },
    { token: TOKEN, onServerRequest: answer('denied') },
  );
  t.after(() => again.close());
  const ran = await again.run('a3', ['echo', 'approved']).catch((err: unknown) => err as Error);
  assert.deepEqual(asked.slice(1), [], 'the session approved this command: not asked again after the restart');
  assert.ok(!(ran instanceof Error), String(ran));
  assert.equal(ran.stdout, 'approved\n');
});

test('a session with many revoked tokens is re-adopted after a SIGKILL', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 600_000,
}, async (t) => {
  let { instanceId, srv, id } = await withSession(t, 'revocations');
  const base = `${srv.http}/v1/sessions/${id}/tokens`;
  // Each revocation is ~40 bytes of the record: 1,800 of them (of the 10,000 a session keeps)
  // make a record past 64 KiB.
  const count = 1800;
  const ids: string[] = [];
  for (let i = 0; i < count; i += 50) {
    const minted = await Promise.all(
      Array.from({ length: 50 }, () => requestJson<{ tokenId: string }>(base, 'POST', {}, TOKEN)),
    );
    ids.push(...minted.map((m) => m.body.tokenId));
  }
  const kept = await requestJson<{ token: string }>(base, 'POST', {}, TOKEN);
  for (let i = 0; i < ids.length; i += 50) {
    const gone = await Promise.all(
      ids.slice(i, i + 50).map((tokenId) => requestJson(`${base}/${tokenId}`, 'DELETE', undefined, TOKEN)),
    );
    assert.deepEqual(new Set(gone.map((g) => g.status)), new Set([204]));
  }
  await srv.kill();
  srv = await server(instanceId);
  const got = await requestJson(`${srv.http}/v1/sessions/${id}`, 'GET', undefined, kept.body.token);
  assert.equal(got.status, 200, `the session is still there: ${JSON.stringify(got.body)}`);
  for (const tokenId of [ids[0], ids.at(-1)]) {
    const gone = await requestJson(`${srv.http}/v1/sessions/${id}/tokens/${tokenId}`, 'DELETE', undefined, TOKEN);
    assert.equal(gone.status, 204, 'the session still answers for its tokens');
  }
});
