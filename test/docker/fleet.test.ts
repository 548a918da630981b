/**
 * A fleet (docs/architecture.md, "Fleet"): three server processes with one --instance-id and
 * --fleet on one engine. A session made on one replica is listed and used through another
 * (WebSocket relayed to its owner, HTTP forwarded); its owner SIGKILLed mid-stream, the client
 * resumes on another replica, which takes the session over: every byte once, seqs continuing,
 * real exit codes; a replica that starts while the others run takes nothing of theirs.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { call, mcpClient, textOf } from '../mcp/helpers.ts';
import { readToEnd, sleep, TestSession } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';
import { Fleet, type Replica } from './fleet-replicas.ts';

const instanceId = `fleet-${randomUUID().slice(0, 8)}`;
const fleet = new Fleet({ instanceId, flags: () => ['--session-token-secret', instanceId] });

function outputOf(s: TestSession, processId: string): string {
  return s
    .eventsOf(processId)
    .filter((n) => n.method === 'process/output')
    .map((n) => Buffer.from((n.params as { chunk: string }).chunk, 'base64').toString('utf8'))
    .join('');
}

async function until(what: string, check: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** A replica's log line saying it took session `id` over. */
const tookOver = (id: string): RegExp => new RegExp(`"sessionId":"${id}"[^\n]*took over a session whose owner is gone`);

async function listed(r: Replica): Promise<string[]> {
  const res = await fetch(`${r.http}/v1/sessions`);
  assert.equal(res.status, 200);
  return ((await res.json()) as { sessions: { sessionId: string }[] }).sessions.map((s) => s.sessionId).sort();
}

test('a fleet of three replicas serves every session through any of them', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 240_000,
}, async (t) => {
  t.after(fleet.cleanUp);
  // C shares no directory with the engine: it reaches agents through the engine (as across hosts).
  const [a, b, c] = await Promise.all([
    fleet.start('a'),
    fleet.start('b'),
    fleet.start('c', ['--docker-agent-socket-dir', 'off']),
  ]);
  let movedOnB: { id: string; onB: TestSession } | undefined;
  const full = { session: { sandbox: { type: 'danger-full-access' } } };

  await t.test('a session made on A is listed and used through B', async () => {
    const onA = await TestSession.open(a.url, full);
    const id = onA.sessionId;
    await onA.start(
      'repl',
      [
        'sh',
        '-c',
        'echo ready; while read -r line; do case $line in size) stty size;; *) echo "echo:$line";; esac; done',
      ],
      { tty: true },
    );
    await until('ready', () => outputOf(onA, 'repl').includes('ready'));
    await onA.close();

    assert.ok((await listed(b)).includes(id), 'B lists the session A made');
    assert.ok((await listed(c)).includes(id), 'C lists it too');
    const info = await fetch(`${b.http}/v1/sessions/${id}`);
    assert.equal(info.status, 200, 'B forwards GET /v1/sessions/:id to A');
    assert.equal(((await info.json()) as { sessionId: string }).sessionId, id);

    // A POST with a body is forwarded whole, and its answer comes back.
    const exec = await fetch(`${c.http}/v1/sessions/${id}/exec_command`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ cmd: 'echo via-c; exit 3', login: false }),
    });
    assert.equal(exec.status, 200);
    const answer = (await exec.json()) as { exit_code?: number; output?: string };
    assert.equal(answer.exit_code, 3);
    assert.match(answer.output ?? '', /^via-c$/m);

    // MCP through B: the connection is made on the owner A, and B forwards every later request to it.
    const { client, transport } = await mcpClient(t, b.http, { headers: { 'x-exec-session': id } });
    assert.match(transport.sessionId ?? '', /^a~/, 'the MCP connection lives on A, named so');
    assert.match(textOf(await call(client, 'exec_command', { cmd: 'echo via-mcp' })), /via-mcp/);

    // A session token made on A works through B: B lets it through to A, which checks it.
    const minted = await fetch(`${a.http}/v1/sessions/${id}/tokens`, { method: 'POST' });
    assert.equal(minted.status, 201);
    const { token } = (await minted.json()) as { token: string };
    const auth = { authorization: `Bearer ${token}` };
    const scoped = await fetch(`${b.http}/v1/sessions/${id}`, { headers: auth });
    assert.equal(scoped.status, 200, 'a session token reaches the owner through B');
    const peek = await TestSession.open(b.url, { resumeSessionId: id }, { token });
    assert.equal(peek.sessionId, id, 'and opens the session over a WebSocket relayed through B');
    await peek.close();

    const onB = await TestSession.open(b.url, { resumeSessionId: id });
    t.after(() => onB.close());
    const write = (s: string) =>
      onB.request('process/write', { processId: 'repl', chunk: Buffer.from(s).toString('base64') });
    assert.deepEqual(await write('hello\n'), { status: 'accepted' });
    await until('the echo', () => outputOf(onB, 'repl').includes('echo:hello'));
    await onB.request('process/resize', { processId: 'repl', cols: 101, rows: 33 });
    await write('size\n');
    await until('the new size', () => outputOf(onB, 'repl').includes('33 101'));
    await onB.request('process/signal', { processId: 'repl', signal: 'SIGTERM' });
    const rest = await readToEnd(onB, 'repl', 0);
    assert.match(rest.text, /ready[\s\S]*echo:hello[\s\S]*33 101/, 'the whole output, from seq 1, through B');
    assert.equal(rest.signal, 'SIGTERM');
    assert.match(a.stderr(), /"msg":"session created"/);
    assert.doesNotMatch(b.stderr(), /took over/, 'B relayed to the live owner, it took nothing over');
  });

  await t.test('A SIGKILLed mid-stream: the client resumes on B and reads every byte once', async () => {
    const onA = await TestSession.open(a.url, full);
    const id = onA.sessionId;
    await onA.start('stream', [
      'sh',
      '-c',
      'i=0; while [ $i -lt 400 ]; do echo line-$i; i=$((i+1)); sleep 0.01; done; exit 5',
    ]);
    await onA.start('nap', ['sh', '-c', 'echo napping; sleep 3; echo woke; exit 9']);
    await until(
      'streaming',
      () => outputOf(onA, 'stream').includes('line-50\n') && outputOf(onA, 'nap').includes('napping'),
    );
    a.child.kill('SIGKILL');
    await new Promise((r) => a.child.once('exit', r));
    const seen = (p: string) => onA.eventsOf(p).map((n) => (n.params as { seq: number }).seq);
    const before = { stream: outputOf(onA, 'stream'), nap: outputOf(onA, 'nap') };
    const last = { stream: Math.max(...seen('stream')), nap: Math.max(...seen('nap')) };

    const onB = await TestSession.open(b.url, { resumeSessionId: id });
    movedOnB = { id, onB };
    const stream = await readToEnd(onB, 'stream', last.stream);
    const expected = Array.from({ length: 400 }, (_, i) => `line-${i}\n`).join('');
    assert.equal(before.stream + stream.text, expected, 'every byte once, in order');
    assert.equal(stream.exitCode, 5);
    assert.deepEqual(
      stream.seqs,
      stream.seqs.map((_, i) => last.stream + 1 + i),
      'seqs continue where the client left off',
    );
    const nap = await readToEnd(onB, 'nap', last.nap);
    assert.equal(before.nap + nap.text, 'napping\nwoke\n');
    assert.equal(nap.exitCode, 9);
    const info = await onB.request<{ agentTransport?: string }>('session/info', {});
    assert.equal(info.agentTransport, 'socket', 'B reopened the link A listened on (one host path)');
    assert.match(b.stderr(), tookOver(id));
    assert.doesNotMatch(c.stderr(), tookOver(id), 'one replica took it over');
    const viaC = await fetch(`${c.http}/v1/sessions/${id}`);
    assert.equal(viaC.status, 200, 'C forwards to the new owner');
    assert.equal(((await viaC.json()) as { attached: boolean }).attached, true, "B's client is attached there");
  });

  await t.test('a replica that starts while others run takes nothing of theirs', async () => {
    const onC = await TestSession.open(c.url, full);
    t.after(() => onC.close());
    await onC.start('nap', ['sh', '-c', 'echo napping; sleep 4; echo woke; exit 7']);
    await until('napping', () => outputOf(onC, 'nap').includes('napping'));
    const before = await listed(b);
    const d = await fleet.start('d');
    assert.deepEqual(await listed(d), before, 'D lists the same sessions');
    assert.equal((await onC.result('nap', 30_000)).exited['exitCode'], 7, "C's command ran on untouched");
    assert.match(outputOf(onC, 'nap'), /napping\nwoke\n/);
    assert.doesNotMatch(d.stderr(), /re-adopted session|took over|removing orphan/, 'D adopted and removed no session');
    const viaD = await fetch(`${d.http}/v1/sessions/${onC.sessionId}`);
    assert.equal(((await viaD.json()) as { attached: boolean }).attached, true, 'C still owns its session');
    // A delete through D reaches the owner; the session is gone for the whole fleet.
    assert.equal((await fetch(`${d.http}/v1/sessions/${onC.sessionId}`, { method: 'DELETE' })).status, 204);
    assert.ok(!(await listed(b)).includes(onC.sessionId));
  });
  await t.test('B SIGKILLed in turn: C, with no shared directory, takes over through the engine', async () => {
    assert.ok(movedOnB);
    const { id, onB } = movedOnB;
    await onB.start('again', ['sh', '-c', 'echo before; sleep 1; echo after; exit 4']);
    await until('before', () => outputOf(onB, 'again').includes('before'));
    const last = Math.max(...onB.eventsOf('again').map((n) => (n.params as { seq: number }).seq));
    b.child.kill('SIGKILL');
    await new Promise((r) => b.child.once('exit', r));
    const onC = await TestSession.open(c.url, { resumeSessionId: id });
    t.after(() => onC.close());
    const rest = await readToEnd(onC, 'again', last);
    assert.equal(outputOf(onB, 'again') + rest.text, 'before\nafter\n');
    assert.equal(rest.exitCode, 4);
    const info = await onC.request<{ agentTransport?: string }>('session/info', {});
    assert.equal(info.agentTransport, 'exec-stream', "C reached the agent through the engine's exec stream");
  });
});
