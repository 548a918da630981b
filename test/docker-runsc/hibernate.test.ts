/**
 * Hibernation against a real engine (runsc registered, experimental mode): a session's
 * container is checkpointed and stopped, and wakes with what ran in it going on; idle sessions
 * hibernate by the server option; runc sessions answer a clear error; a restarted server
 * re-adopts a hibernated session without waking it.
 */
import assert from 'node:assert/strict';
import { type TestContext, test } from 'node:test';
import { dockerTestOptions } from '../docker/engine.ts';
import { docker, sleep } from '../docker/helpers.ts';
import { GVISOR, gvisorSession, http, readCounter } from '../support/gvisor.ts';
import { abandon, readToEnd, startServer, TestSession, type TestServer } from '../support/harness.ts';

/** A counter loop in its own session (`setsid`: detached from the command's exec, which ends at once). */
const COUNTER =
  "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /workspace/count; sleep 0.05; done' </dev/null >/dev/null 2>&1 & echo $!";

async function state(containerId: string): Promise<{ status: string; pid: number }> {
  const [status, pid] = (await docker('inspect', '-f', '{{.State.Status}} {{.State.Pid}}', containerId))
    .trim()
    .split(' ');
  return { status: status!, pid: Number(pid) };
}

/** The counter loop's value now (COUNTER writes it). */
const counter = (s: TestSession, id: string): Promise<number> => readCounter(s, id, '/workspace/count');

/**
 * The counter once it is past `than` (read as `id-1`, `id-2`...; for at most 10 s): a restored
 * loop on a loaded machine can take longer than a fixed wait to write again.
 */
async function counterPast(s: TestSession, id: string, than: number): Promise<number> {
  const end = Date.now() + 10_000;
  let now = await counter(s, `${id}-1`);
  for (let i = 2; now <= than && Date.now() < end; i++) {
    await sleep(100);
    now = await counter(s, `${id}-${i}`);
  }
  return now;
}

async function pidsOf(s: TestSession, id: string): Promise<string> {
  const r = await s.run(id, ['sh', '-c', 'ps -o pid,args | grep "[w]hile :; do i="']);
  return r.stdout.trim().split(/\s+/)[0] ?? '';
}

/** The first server "crashes" (abandoned without shutdown); its successor of the same instance id starts. */
async function successor(
  t: TestContext,
  first: TestServer,
  instanceId: string,
  flags: readonly string[],
): Promise<TestServer> {
  await abandon(first);
  const second = await startServer({ backend: 'docker', instanceId, flags: [...flags] });
  t.after(() => second.close());
  t.after(() => first.app.close().catch(() => undefined));
  return second;
}

const PTY_OUT = (s: TestSession, id: string): string =>
  Buffer.concat(
    s
      .eventsOf(id)
      .filter((n) => n.method === 'process/output')
      .map((n) => Buffer.from(String(n.params['chunk']), 'base64')),
  ).toString('utf8');

test(
  'hibernate stops the container with its memory; on wake the counter and a running PTY shell go on',
  dockerTestOptions,
  async (t) => {
    const { s } = await gvisorSession(t);
    const info = await s.request('session/info', {});
    const containerId = String(info['containerId']);
    assert.equal(
      s.initResult['capabilities'] && (s.initResult['capabilities'] as Record<string, unknown>)['hibernation'],
      true,
    );
    const started = await s.run('loop', ['sh', '-c', COUNTER]);
    assert.equal(started.exited['exitCode'], 0);
    await sleep(500);
    const loopPid = await pidsOf(s, 'ps1');
    assert.notEqual(loopPid, '');

    // A PTY shell kept running across the hibernation (through the exec agent).
    await s.start('shell', ['sh'], { tty: true });
    await s.request('process/write', {
      processId: 'shell',
      chunk: Buffer.from('echo ready-$((40+2)); echo $$ > /workspace/shell.pid\n').toString('base64'),
    });
    await s.waitFor(() => PTY_OUT(s, 'shell').includes('ready-42'));
    const seqBefore = Math.max(
      ...s
        .eventsOf('shell')
        .filter((n) => n.method === 'process/output')
        .map((n) => Number(n.params['seq'])),
    );

    const before = await counter(s, 'c1');
    const hib = await s.request('session/hibernate', {});
    assert.equal(hib['hibernation'], 'hibernated');
    assert.equal((await s.request('session/info', {}))['hibernation'], 'hibernated');
    // Memory freed: the container (and every process in it) is stopped; the engine keeps the checkpoint.
    assert.deepEqual(await state(containerId), { status: 'exited', pid: 0 });
    assert.match(await docker('checkpoint', 'ls', containerId), /exec-server-hibernation/);
    await sleep(1500);
    assert.equal((await state(containerId)).status, 'exited', 'still hibernated: nothing woke it');
    const listed = await s.request<{ processes: Array<Record<string, unknown>> }>('process/list', {});
    assert.ok(
      listed.processes.some((p) => p['processId'] === 'shell'),
      'the shell is still a process of the session',
    );

    const woke = await s.request('session/wake', {});
    assert.equal(woke['hibernation'], 'awake');
    assert.equal((await state(containerId)).status, 'running');
    const after = await counter(s, 'c2');
    assert.ok(after >= before, `the loop goes on from ${before} (read ${after}), not from 0`);
    assert.equal(await pidsOf(s, 'ps2'), loopPid, 'the same loop process, not a new one');
    assert.ok((await counterPast(s, 'c3', after)) > after, 'and keeps counting');
    assert.doesNotMatch(
      await docker('checkpoint', 'ls', containerId),
      /exec-server-hibernation/,
      'the checkpoint is gone after the wake',
    );

    // The same shell answers, its output continuing with the next seq.
    await s.request('process/write', {
      processId: 'shell',
      chunk: Buffer.from('echo again-$((40+3)) $$; exit\n').toString('base64'),
    });
    const shell = await s.result('shell');
    const pid = (await s.request('fs/readFile', { path: '/workspace/shell.pid' }))['dataBase64'];
    assert.match(shell.pty, new RegExp(`again-43 ${Buffer.from(String(pid), 'base64').toString().trim()}`));
    assert.equal(shell.exited['exitCode'], 0);
    const seqs = s
      .eventsOf('shell')
      .filter((n) => n.method === 'process/output')
      .map((n) => Number(n.params['seq']));
    assert.deepEqual(
      seqs,
      [...seqs].sort((a, b) => a - b),
      'seq in order',
    );
    assert.equal(new Set(seqs).size, seqs.length, 'no seq twice');
    assert.ok(
      seqs.some((q) => q > seqBefore),
      'output after the wake continues the seq',
    );
  },
);

test(
  'a session hibernates and wakes again and again: three cycles, the counter going on each time',
  dockerTestOptions,
  async (t) => {
    const { s } = await gvisorSession(t);
    const containerId = String((await s.request('session/info', {}))['containerId']);
    assert.equal((await s.run('loop', ['sh', '-c', COUNTER])).exited['exitCode'], 0);
    await sleep(300);
    let last = await counter(s, 'c0');
    const names = new Set<string>();
    for (let cycle = 1; cycle <= 3; cycle++) {
      assert.equal(
        (await s.request('session/hibernate', {}))['hibernation'],
        'hibernated',
        `cycle ${cycle}: hibernated`,
      );
      const listed = await docker('checkpoint', 'ls', containerId);
      const name = /exec-server-hibernation-\S+/.exec(listed)?.[0];
      assert.ok(name !== undefined, `cycle ${cycle}: a checkpoint of ours: ${listed}`);
      assert.ok(!names.has(name), `cycle ${cycle}: a name of its own (${name})`);
      names.add(name);
      assert.equal((await s.request('session/wake', {}))['hibernation'], 'awake', `cycle ${cycle}: awake`);
      const now = await counterPast(s, `c${cycle}`, last);
      assert.ok(now > last, `cycle ${cycle}: the loop goes on (${last} -> ${now})`);
      last = now;
    }
    assert.doesNotMatch(
      await docker('checkpoint', 'ls', containerId),
      /exec-server-hibernation/,
      'no checkpoint left after the last wake',
    );
  },
);

test('on the exec path, hibernate refuses while a command holds an attached exec', dockerTestOptions, async (t) => {
  const server = await startServer({
    backend: 'docker',
    flags: ['--allowed-runtimes', 'runsc', '--docker-exec-path', 'exec'],
  });
  t.after(() => server.close());
  const s = await TestSession.open(server.url, { session: GVISOR });
  t.after(() => s.close());
  await s.start('shell', ['sh'], { tty: true });
  await s.request('process/write', { processId: 'shell', chunk: Buffer.from('echo ready\n').toString('base64') });
  await s.waitFor(() => PTY_OUT(s, 'shell').includes('ready'));
  await assert.rejects(
    s.request('session/hibernate', {}),
    /cannot hibernate: 1 process\(es\) still running through attached engine execs/,
  );
  await s.request('process/write', { processId: 'shell', chunk: Buffer.from('exit\n').toString('base64') });
  await s.result('shell');
  assert.equal((await s.request('session/hibernate', {}))['hibernation'], 'hibernated', 'once it ended');
  const r = await s.run('after', ['sh', '-c', 'echo woke']);
  assert.equal(r.stdout, 'woke\n');
});

test('HTTP hibernate, then the next request that needs the container wakes it', dockerTestOptions, async (t) => {
  const { server, s } = await gvisorSession(t);
  const id = s.sessionId;
  await s.request('fs/writeFile', {
    path: '/workspace/note.txt',
    dataBase64: Buffer.from('kept across\n').toString('base64'),
  });
  const hib = await http(server, 'POST', `/v1/sessions/${id}/hibernate`);
  assert.equal(hib.status, 200);
  assert.equal(hib.body['hibernation'], 'hibernated');
  const listed = await http(server, 'GET', `/v1/sessions/${id}`);
  assert.equal(listed.body['hibernation'], 'hibernated');
  assert.equal(typeof listed.body['hibernatedAt'], 'string');
  assert.equal((await state(String(listed.body['containerId']))).status, 'exited');
  // A second hibernate is a no-op; a file read wakes the session.
  assert.equal((await http(server, 'POST', `/v1/sessions/${id}/hibernate`)).status, 200);
  const read = await s.request('fs/readFile', { path: '/workspace/note.txt' });
  assert.equal(Buffer.from(String(read['dataBase64']), 'base64').toString(), 'kept across\n');
  assert.equal((await http(server, 'GET', `/v1/sessions/${id}`)).body['hibernation'], 'awake');
  assert.equal((await http(server, 'POST', `/v1/sessions/${id}/wake`)).body['hibernation'], 'awake');
});

test('hibernate on runc answers a clear error naming the reason', dockerTestOptions, async (t) => {
  const server = await startServer({ backend: 'docker' });
  t.after(() => server.close());
  const s = await TestSession.open(server.url, { session: { runtime: 'runc' } });
  t.after(() => s.close());
  assert.equal((s.initResult['capabilities'] as Record<string, unknown>)['hibernation'], false);
  await assert.rejects(
    s.request('session/hibernate', {}),
    /cannot hibernate: session runtime runc cannot checkpoint: hibernation needs a gVisor \(runsc\) session \(runc checkpoints need CRIU/,
  );
  const res = await http(server, 'POST', `/v1/sessions/${s.sessionId}/hibernate`);
  assert.equal(res.status, 501);
  assert.equal(res.body['code'], 'EXEC_ERR_UNSUPPORTED');
  assert.match(String(res.body['message']), /runc cannot checkpoint/);
  const info = await s.request('session/info', {});
  assert.equal(info['hibernation'], 'awake');
  assert.equal((await state(String(info['containerId']))).status, 'running');
});

test('hibernation on the local backend is a clear error', async (t) => {
  const server = await startServer({ backend: 'local' });
  t.after(() => server.close());
  const created = await http(server, 'POST', '/v1/sessions', {});
  const res = await http(server, 'POST', `/v1/sessions/${String(created.body['sessionId'])}/hibernate`);
  assert.equal(res.status, 501);
  assert.match(String(res.body['message']), /hibernation needs the docker backend/);
});

test(
  'idle sessions hibernate by --idle-hibernate-seconds instead of being reaped; runc ones stay',
  dockerTestOptions,
  async (t) => {
    const server = await startServer({
      backend: 'docker',
      flags: ['--allowed-runtimes', 'runsc', '--idle-hibernate-seconds', '1', '--idle-timeout-seconds', '2'],
    });
    t.after(() => server.close());
    const gvisor = await http(server, 'POST', '/v1/sessions', GVISOR);
    assert.equal(gvisor.status, 201);
    const id = String(gvisor.body['sessionId']);
    // The idle check runs every 5 s; a checkpoint on a busy 2-core host can take seconds.
    const deadline = Date.now() + 60_000;
    let seen: Record<string, unknown> = {};
    while (Date.now() < deadline) {
      seen = (await http(server, 'GET', `/v1/sessions/${id}`)).body;
      if (seen['hibernation'] === 'hibernated') break;
      await sleep(250);
    }
    assert.equal(seen['hibernation'], 'hibernated', 'hibernated by the idle check');
    assert.equal((await state(String(gvisor.body['containerId']))).status, 'exited');
    // Past its idle timeout (2 s) it is still there: hibernated, not reaped.
    await sleep(6000);
    assert.equal((await http(server, 'GET', `/v1/sessions/${id}`)).status, 200);
    // A runc session cannot hibernate: the idle timeout reaps it as before.
    const plain = await http(server, 'POST', '/v1/sessions', { runtime: 'runc' });
    const plainId = String(plain.body['sessionId']);
    const reapDeadline = Date.now() + 30_000;
    let status = 200;
    while (Date.now() < reapDeadline && status === 200) {
      status = (await http(server, 'GET', `/v1/sessions/${plainId}`)).status;
      if (status === 200) await sleep(500);
    }
    assert.equal(status, 404, 'the runc session was reaped at its idle timeout');
    // Resuming the hibernated one and running a command wakes it.
    const s = await TestSession.open(server.url, { resumeSessionId: id });
    t.after(() => s.close());
    const r = await s.run('w', ['sh', '-c', 'echo awake']);
    assert.equal(r.stdout, 'awake\n');
    assert.equal((await s.request('session/info', {}))['hibernation'], 'awake');
  },
);

test(
  'a server restart between hibernate and wake: re-adopted hibernated, woken on use, policy kept',
  dockerTestOptions,
  async (t) => {
    const instanceId = `hibernate-restart-${process.pid}-${Date.now()}`;
    const flags = ['--allowed-runtimes', 'runsc'];
    const first = await startServer({ backend: 'docker', instanceId, flags });
    const s = await TestSession.open(first.url, {
      session: { ...GVISOR, approvalPolicy: 'on-failure', labels: { team: 'sleepers' } },
    });
    const containerId = String((await s.request('session/info', {}))['containerId']);
    await s.run('loop', ['sh', '-c', COUNTER]);
    await sleep(500);
    await sleep(300); // the record is stored in the background
    const before = await counter(s, 'c1');
    await s.request('session/hibernate', {});
    await s.close();

    // The first server "crashes": abandoned without shutdown; the container stays checkpointed.
    const second = await successor(t, first, instanceId, flags);
    const listed = await http(second, 'GET', `/v1/sessions/${s.sessionId}`);
    assert.equal(listed.status, 200, 're-adopted');
    assert.equal(listed.body['hibernation'], 'hibernated', 'without waking it');
    assert.equal(listed.body['runtime'], 'runsc');
    assert.equal(listed.body['approvalPolicy'], 'on-failure', 'its policy came back from the record');
    assert.deepEqual(listed.body['labels'], { team: 'sleepers' });
    assert.equal((await state(containerId)).status, 'exited');
    const again = await TestSession.open(second.url, { resumeSessionId: s.sessionId });
    t.after(() => again.close());
    const after = await counter(again, 'c2');
    assert.ok(after >= before, `the loop goes on from ${before} (read ${after})`);
    assert.equal((await state(containerId)).status, 'running');
    assert.equal((await again.request('session/info', {}))['hibernation'], 'awake');
  },
);

test(
  'a restart while hibernated with a running command: the session wakes to hand it over, every byte once',
  dockerTestOptions,
  async (t) => {
    const instanceId = `hibernate-restart-proc-${process.pid}-${Date.now()}`;
    const flags = ['--allowed-runtimes', 'runsc'];
    const first = await startServer({ backend: 'docker', instanceId, flags });
    const s = await TestSession.open(first.url, { session: GVISOR });
    await s.start('ticker', [
      'sh',
      '-c',
      'i=0; while [ $i -lt 40 ]; do echo tick-$i; i=$((i+1)); sleep 0.1; done; exit 4',
    ]);
    await s.waitFor(() =>
      Buffer.concat(
        s
          .eventsOf('ticker')
          .filter((n) => n.method === 'process/output')
          .map((n) => Buffer.from(String(n.params['chunk']), 'base64')),
      )
        .toString()
        .includes('tick-3'),
    );
    await sleep(300); // the record is stored in the background
    await s.request('session/hibernate', {});
    await s.close();

    const second = await successor(t, first, instanceId, flags);
    const listed = await http(second, 'GET', `/v1/sessions/${s.sessionId}`);
    assert.equal(listed.status, 200);
    assert.equal(listed.body['hibernation'], 'awake', 'woken at startup to hand its running command over');
    const again = await TestSession.open(second.url, { resumeSessionId: s.sessionId });
    t.after(() => again.close());
    const { text, seqs, exitCode } = await readToEnd(again, 'ticker', 0, 60_000);
    assert.equal(exitCode, 4, 'the real exit code');
    assert.equal(text, Array.from({ length: 40 }, (_, i) => `tick-${i}\n`).join(''), 'every line once, in order');
    assert.deepEqual(
      seqs,
      [...seqs].sort((a, b) => a - b),
    );
  },
);
