/**
 * A fleet replica SIGKILLed right after it answered loses nothing it promised. Each step
 * is answered by the session's current owner, which is killed the moment the answer is read; the
 * next step goes through another replica, which takes the session over. Also: a client relayed
 * through B to the owner when the owner dies, an HTTP call forwarded when the owner dies, and
 * two replicas asked to take one orphan over at once.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { requestJson } from '../http/helpers.ts';
import { readToEnd, sleep, TestSession } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';
import { Fleet, type Replica } from './fleet-replicas.ts';
import { docker } from './helpers.ts';

const instanceId = `fleet-kills-${randomUUID().slice(0, 8)}`;
const fleet = new Fleet({
  instanceId,
  flags: () => ['--session-token-secret', instanceId, '--max-sessions-per-tenant', '20'],
});

async function kill(r: Replica): Promise<void> {
  r.child.kill('SIGKILL');
  if (r.child.exitCode === null && r.child.signalCode === null) await new Promise((res) => r.child.once('exit', res));
}

const tookOver = (id: string): RegExp => new RegExp(`"sessionId":"${id}"[^\n]*took over a session whose owner is gone`);

interface Info {
  sessionId: string;
  labels?: Record<string, string>;
  sandbox?: { type: string };
  approvalPolicy?: string;
}

const SPEC = {
  labels: { owner: 'fleet-kills' },
  sandbox: { type: 'danger-full-access' },
  approvalPolicy: 'never',
  previewPorts: true,
};

async function checkSession(r: Replica, id: string): Promise<void> {
  const got = await requestJson<Info>(`${r.http}/v1/sessions/${id}`, 'GET');
  assert.equal(got.status, 200, `session ${id} via ${r.name}: ${JSON.stringify(got.body)}`);
  assert.deepEqual(got.body.labels, SPEC.labels);
  assert.equal(got.body.sandbox?.type, 'danger-full-access');
  assert.equal(got.body.approvalPolicy, 'never');
}

async function quotaSlots(): Promise<string[]> {
  const out = await docker(
    'ps',
    '-a',
    '--filter',
    `label=exec-server.quota-instance=${instanceId}`,
    '--format',
    '{{.Label "exec-server.quota-session"}}',
  );
  return out.split('\n').filter(Boolean).sort();
}

test('a fleet owner SIGKILLed right after each answer loses nothing', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 300_000,
}, async (t) => {
  t.after(fleet.cleanUp);
  let n = 0;
  const next = () => fleet.start(`r${n++}`);
  let owner = await next();
  let other = await next();

  // Round 0: a create (and a batch) answered, the owner killed.
  const made = await requestJson<Info>(`${owner.http}/v1/sessions`, 'POST', SPEC);
  const batch = await requestJson<{ sessions: Info[] }>(`${owner.http}/v1/sessions?count=2`, 'POST', SPEC);
  await kill(owner);
  assert.equal(made.status, 201, JSON.stringify(made.body));
  assert.equal(batch.status, 201, JSON.stringify(batch.body));
  const id = made.body.sessionId;
  const all = [id, ...batch.body.sessions.map((s) => s.sessionId)];
  for (const s of all) await checkSession(other, s);
  [owner, other] = [other, await next()];

  // Round 1: a token minted, another revoked, on the owner; then the owner killed.
  const mint = async (): Promise<{ token: string; tokenId: string }> => {
    const r = await requestJson<{ token: string; tokenId: string }>(
      `${owner.http}/v1/sessions/${id}/tokens`,
      'POST',
      {},
    );
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body;
  };
  const kept = await mint();
  const revoked = await mint();
  const del = await requestJson(`${owner.http}/v1/sessions/${id}/tokens/${revoked.tokenId}`, 'DELETE');
  await kill(owner);
  assert.equal(del.status, 204);
  const checkTokens = async (r: Replica): Promise<void> => {
    const ok = await requestJson(`${r.http}/v1/sessions/${id}`, 'GET', undefined, kept.token);
    assert.equal(ok.status, 200, `kept token via ${r.name}: ${JSON.stringify(ok.body)}`);
    const no = await requestJson<{ code: string }>(`${r.http}/v1/sessions/${id}`, 'GET', undefined, revoked.token);
    assert.equal(no.status, 401, `revoked token via ${r.name}: ${JSON.stringify(no.body)}`);
  };
  await checkTokens(other);
  [owner, other] = [other, await next()];

  // Round 2: a port exposed on the owner; the owner killed.
  const port = await requestJson(`${owner.http}/v1/sessions/${id}/ports`, 'POST', { port: 8080 });
  await kill(owner);
  assert.equal(port.status, 201, JSON.stringify(port.body));
  const ports = await requestJson<{ ports: { port: number }[] }>(`${other.http}/v1/sessions/${id}/ports`, 'GET');
  assert.equal(ports.status, 200, JSON.stringify(ports.body));
  assert.deepEqual(
    ports.body.ports.map((p) => p.port),
    [8080],
    `port kept: ${JSON.stringify(ports.body)}`,
  );
  [owner, other] = [other, await next()];

  // Round 3: a process started on the owner; the owner killed right after the answer.
  let s = await TestSession.open(owner.url, { resumeSessionId: id });
  await s.request('process/start', { processId: 'p', argv: ['sh', '-c', 'echo before; sleep 2; echo after'] });
  await kill(owner);
  s.conn.socket.terminate();
  s = await TestSession.open(other.url, { resumeSessionId: id });
  const listed = await s.request<{ processes: { processId: string }[] }>('process/list', {});
  assert.ok(
    listed.processes.some((p) => p.processId === 'p'),
    JSON.stringify(listed),
  );
  const out = await readToEnd(s, 'p', 0, 60_000);
  assert.equal(out.text, 'before\nafter\n');
  assert.equal(out.exitCode, 0);
  [owner, other] = [other, await next()];

  // Round 4: a file written on the owner; the owner killed right after the answer.
  const data = Buffer.from('y'.repeat(100_000)).toString('base64');
  await s.request('fs/writeFile', { path: '/workspace/answered.txt', dataBase64: data });
  await kill(owner);
  s.conn.socket.terminate();
  s = await TestSession.open(other.url, { resumeSessionId: id });
  const read = await s.request<{ dataBase64: string }>('fs/readFile', { path: '/workspace/answered.txt' });
  assert.equal(read.dataBase64, data);
  await s.close();

  // Everything answered is still there, and each session holds one quota slot.
  await checkSession(other, id);
  await checkTokens(other);
  for (const b of batch.body.sessions) await checkSession(other, b.sessionId);
  assert.deepEqual(await quotaSlots(), [...all].sort(), 'one quota slot per session after the take-overs');
});

test('an owner SIGKILLed under a relayed stream, a forwarded call and a double take-over', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 300_000,
}, async (t) => {
  const [a, b, c, d] = await fleet.begin(t, 'ka', 'kb', 'kc', 'kd');

  // A client on B relayed to the owner A; A dies mid-stream.
  const made = await requestJson<Info>(`${a.http}/v1/sessions`, 'POST', SPEC);
  assert.equal(made.status, 201);
  const id = made.body.sessionId;
  const onB = await TestSession.open(b.url, { resumeSessionId: id });
  await onB.request('process/start', {
    processId: 'stream',
    argv: ['sh', '-c', 'i=0; while [ $i -lt 300 ]; do echo line-$i; i=$((i+1)); sleep 0.01; done; exit 4'],
  });
  const outputOf = (s: TestSession, p: string) =>
    s
      .eventsOf(p)
      .filter((e) => e.method === 'process/output')
      .map((e) => Buffer.from((e.params as { chunk: string }).chunk, 'base64').toString('utf8'))
      .join('');
  const deadline = Date.now() + 20_000;
  while (!outputOf(onB, 'stream').includes('line-40\n') && Date.now() < deadline) await sleep(20);
  const closed = new Promise<number>((res) => onB.conn.socket.once('close', (code: number) => res(code)));
  await kill(a);
  const code = await Promise.race([closed, sleep(15_000).then(() => -1)]);
  assert.equal(code, 1012, 'the relayed client is told the owner went away');
  const before = outputOf(onB, 'stream');
  const seqs = onB.eventsOf('stream').map((e) => (e.params as { seq: number }).seq);
  const last = Math.max(...seqs);
  assert.deepEqual(
    seqs,
    seqs.map((_, i) => i + 1),
    'no gap or duplicate before the kill',
  );
  const onC = await TestSession.open(c.url, { resumeSessionId: id });
  const rest = await readToEnd(onC, 'stream', last);
  assert.equal(before + rest.text, Array.from({ length: 300 }, (_, i) => `line-${i}\n`).join(''));
  assert.equal(rest.exitCode, 4);
  await onC.close();

  // An HTTP call forwarded through B to the owner C; C dies while it runs.
  const call = requestJson<{ code?: string; exit_code?: number }>(`${b.http}/v1/sessions/${id}/exec_command`, 'POST', {
    cmd: 'echo ran >> /workspace/ran.txt; sleep 10; echo done',
    login: false,
  });
  // Killed once the command runs on C (a fixed wait could kill C before the call reached it).
  const running = async (): Promise<boolean> => {
    const cid = (await docker('ps', '-q', '--filter', `label=exec-server.session-id=${id}`)).trim();
    return cid !== '' && (await docker('exec', cid, 'cat', '/workspace/ran.txt').catch(() => '')).includes('ran');
  };
  for (const end = Date.now() + 15_000; !(await running()) && Date.now() < end; ) await sleep(50);
  await kill(c);
  const killedAt = Date.now();
  const answer = await Promise.race([call, sleep(20_000).then(() => undefined)]);
  assert.ok(answer !== undefined, 'the forwarded call does not hang when the owner dies');
  assert.ok(answer.status >= 500, `a clear error: ${answer.status} ${JSON.stringify(answer.body)}`);
  assert.ok(Date.now() - killedAt < 20_000);

  // Two replicas asked at once for the orphan: one takes it over, the other forwards.
  const [viaB, viaD] = await Promise.all([
    requestJson(`${b.http}/v1/sessions/${id}`, 'GET'),
    requestJson(`${d.http}/v1/sessions/${id}`, 'GET'),
  ]);
  assert.equal(viaB.status, 200, JSON.stringify(viaB.body));
  assert.equal(viaD.status, 200, JSON.stringify(viaD.body));
  const takers = [b, d].filter((r) => tookOver(id).test(r.stderr()));
  assert.equal(takers.length, 1, `exactly one took it over: ${takers.map((r) => r.name).join(',')}`);
  const s = await TestSession.open(d.url, { resumeSessionId: id });
  const ran = await s.request<{ dataBase64: string }>('fs/readFile', { path: '/workspace/ran.txt' });
  assert.equal(Buffer.from(ran.dataBase64, 'base64').toString(), 'ran\n', 'the forwarded command ran once');
  const list = await s.request<{ processes: { processId: string }[] }>('process/list', {});
  assert.equal(new Set(list.processes.map((p) => p.processId)).size, list.processes.length, 'no duplicate process');
  await s.close();
  assert.deepEqual(await quotaSlots(), [id], 'one quota slot for the session after two take-overs');
});

test('an owner paused (SIGSTOP) then resumed: one owner, no hang through the others', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 120_000,
}, async (t) => {
  const [a, b] = await fleet.begin(t, 'pa', 'pb');
  const made = await requestJson<Info>(`${a.http}/v1/sessions`, 'POST', SPEC);
  assert.equal(made.status, 201);
  const id = made.body.sessionId;
  a.child.kill('SIGSTOP');
  const started = Date.now();
  const viaB = await Promise.race([
    requestJson<{ code?: string }>(`${b.http}/v1/sessions/${id}`, 'GET'),
    sleep(25_000).then(() => undefined),
  ]);
  const waited = Date.now() - started;
  a.child.kill('SIGCONT');
  assert.ok(viaB !== undefined, `a call through B for a paused owner's session hung (${waited} ms)`);
  // The owner's silence is noticed after 10 s of no answer from its /healthz either.
  assert.ok(waited < 24_000, `answered in ${waited} ms: ${viaB.status} ${JSON.stringify(viaB.body)}`);
  assert.equal(viaB.status, 503, JSON.stringify(viaB.body));
  assert.equal(viaB.body.code, 'EXEC_ERR_BACKEND_UNAVAILABLE');
  assert.doesNotMatch(b.stderr(), tookOver(id), 'the paused owner kept its lease: nothing taken over');
});
