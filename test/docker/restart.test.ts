/**
 * Processes that survive the server: a real server process is SIGKILLed while a command streams
 * and another sleeps; a new one with the same instance id re-adopts the session, and a client
 * that resumes reads every byte it had not read, once and in order, with seqs continuing and the
 * real exit codes (docs/docker-backend.md, "Processes that survive the server").
 */
import assert from 'node:assert/strict';
import { type TestContext, test } from 'node:test';
import Docker from 'dockerode';
import { type DevServer, startDevServer } from '../support/dev-server.ts';
import { readToEnd, sleep, TestSession } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';

/** The first server of `instanceId`, and `restart` to start its successor; both end with the test. */
async function servers(
  t: TestContext,
  instanceId: string,
  flags: readonly string[] = [],
): Promise<{ first: DevServer; restart: () => Promise<DevServer> }> {
  const first = await startDevServer({ image: TEST_IMAGE, instanceId, flags });
  let second: DevServer | undefined;
  t.after(async () => {
    await first.kill();
    await second?.stop();
  });
  return {
    first,
    restart: async () => {
      second = await startDevServer({ image: TEST_IMAGE, instanceId, flags });
      return second;
    },
  };
}

interface Seen {
  text: string;
  lastSeq: number;
  seqs: number[];
}

function follow(s: TestSession, processId: string): Seen {
  const seen: Seen = { text: '', lastSeq: 0, seqs: [] };
  s.conn.onNotification((n) => {
    if (!n.method.startsWith('process/') || !('processId' in n.params) || n.params.processId !== processId) return;
    const seq = n.params.seq;
    seen.seqs.push(seq);
    seen.lastSeq = seq;
    if (n.method === 'process/output' && 'chunk' in n.params)
      seen.text += Buffer.from(n.params.chunk, 'base64').toString('utf8');
  });
  return seen;
}

test('SIGKILL the server mid-stream and mid-sleep, restart it: every byte once, seqs continue, real exit codes', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 300_000,
}, async (t) => {
  const instanceId = `restart-${process.pid}-${Date.now()}`;
  const { first, restart } = await servers(t, instanceId);
  const s = await TestSession.open(first.url, { session: { sandbox: { type: 'danger-full-access' } } });
  const streaming = follow(s, 'stream');
  const sleeping = follow(s, 'nap');
  await s.request('process/start', {
    processId: 'stream',
    argv: ['sh', '-c', 'i=0; while [ $i -lt 400 ]; do echo line-$i; i=$((i+1)); sleep 0.01; done; exit 5'],
  });
  await s.request('process/start', {
    processId: 'nap',
    argv: ['sh', '-c', 'echo napping; sleep 3; echo woke; exit 9'],
  });
  while (!streaming.text.includes('line-50\n') || !sleeping.text.includes('napping')) await sleep(20);

  await first.kill();
  const before = { stream: { ...streaming }, nap: { ...sleeping } };
  const second = await restart();
  const again = await TestSession.open(second.url, { resumeSessionId: s.sessionId });
  t.after(() => again.close());

  const listed = await again.request<{ processes: Array<Record<string, unknown>> }>('process/list', {});
  assert.deepEqual(
    listed.processes.map((p) => p['processId']).sort(),
    ['nap', 'stream'],
    'both processes are known to the new server',
  );

  const stream = await readToEnd(again, 'stream', before.stream.lastSeq, 600_000);
  const expected = Array.from({ length: 400 }, (_, i) => `line-${i}\n`).join('');
  assert.equal(before.stream.text + stream.text, expected, 'every byte once, in order');
  assert.equal(stream.exitCode, 5);
  assert.equal(stream.seqs[0], before.stream.lastSeq + 1, 'seqs continue where the client left off');
  assert.deepEqual(
    stream.seqs,
    stream.seqs.map((_, i) => before.stream.lastSeq + 1 + i),
  );

  const nap = await readToEnd(again, 'nap', before.nap.lastSeq, 600_000);
  assert.equal(before.nap.text + nap.text, 'napping\nwoke\n');
  assert.equal(nap.exitCode, 9);
  // The new server reached the surviving agent by its socket, as the first did (docs/docker-backend.md).
  const info = await again.request<{ agentTransport?: string }>('session/info', {});
  assert.equal(info.agentTransport, 'socket');
});

/** The container's processes whose command line contains `marker` (the engine's `top`: no exec). */
async function processesWith(containerId: string, marker: string): Promise<string[]> {
  const docker = new Docker(process.env.DOCKER_HOST ? undefined : { socketPath: '/var/run/docker.sock' });
  const top = (await docker.getContainer(containerId).top({ ps_args: '-eo pid,args' })) as {
    Titles: string[];
    Processes: string[][];
  };
  return top.Processes.map((p) => p.join(' ')).filter((l) => l.includes(marker));
}

test('exec path: SIGKILL the server, restart it: the commands it left running are listed lost with the reason, and killed', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 300_000,
}, async (t) => {
  const instanceId = `restart-exec-${process.pid}-${Date.now()}`;
  const { first, restart } = await servers(t, instanceId, ['--docker-exec-path', 'exec']);
  const marker = `${process.pid}${Date.now() % 100000}`;
  // A root session and a sandboxed one: each kill runs as the command's own user.
  const sessions = [
    await TestSession.open(first.url, { session: { sandbox: { type: 'danger-full-access' } } }),
    await TestSession.open(first.url, { session: { sandbox: { type: 'workspace-write' } } }),
  ];
  const containers: string[] = [];
  const seen: Seen[] = [];
  for (const [i, s] of sessions.entries()) {
    const info = await s.request<Record<string, unknown>>('session/info', {});
    assert.equal(info['execPath'], 'exec');
    containers.push(String(info['containerId']));
    seen.push(follow(s, 'nap'));
    // The command and a background child in its process group.
    await s.request('process/start', {
      processId: 'nap',
      argv: ['sh', '-c', `sleep 30${i}${marker} & echo napping; exec sleep 31${i}${marker}`],
    });
  }
  for (const [i, s] of sessions.entries()) {
    while (!seen[i]!.text.includes('napping')) await sleep(20);
    await s.request('process/start', { processId: 'quick', argv: ['true'] });
    assert.equal((await processesWith(containers[i]!, marker)).length, 2, 'both sleeps run');
  }
  const before = seen.map((x) => x.lastSeq);

  await first.kill();
  for (const [i, c] of containers.entries())
    assert.equal((await processesWith(c, marker)).length, 2, `session ${i}: the commands outlive the server`);
  const second = await restart();
  const started = performance.now();

  for (const [i, s] of sessions.entries()) {
    const again = await TestSession.open(second.url, { resumeSessionId: s.sessionId });
    t.after(() => again.close());
    const listed = await again.request<{ processes: Array<Record<string, unknown>> }>('process/list', {});
    const nap = listed.processes.find((p) => p['processId'] === 'nap');
    assert.ok(nap, `session ${i}: the command is listed: ${JSON.stringify(listed.processes)}`);
    assert.equal(nap['status'], 'lost');
    assert.deepEqual(nap['argv'], ['sh', '-c', `sleep 30${i}${marker} & echo napping; exec sleep 31${i}${marker}`]);
    assert.equal(nap['sandboxType'], i === 0 ? 'none' : 'container-user');
    assert.equal(
      listed.processes.find((p) => p['processId'] === 'quick'),
      undefined,
      'a command that had ended is not made up',
    );
    const read = await again.request<Record<string, unknown>>('process/read', {
      processId: 'nap',
      afterSeq: before[i],
      waitMs: 5000,
    });
    assert.equal(read['terminal'], 'lost');
    assert.equal(read['exited'], true);
    assert.equal(read['closed'], true);
    assert.equal(read['exitCode'], -1);
    assert.match(
      String(read['failure']),
      /server restarted; the command ran as a docker exec and could not be re-attached/,
    );
    assert.ok((read['nextSeq'] as number) > before[i]!, 'the end lies past every seq the client saw');
    assert.deepEqual(
      await processesWith(containers[i]!, marker),
      [],
      `session ${i}: the command and its child are killed`,
    );
    const r = await again.request<Record<string, unknown>>('process/start', {
      processId: 'after',
      argv: ['echo', 'ok'],
    });
    assert.equal(r['processId'], 'after', 'the session runs commands again');
  }
  t.diagnostic(
    `second server: both sessions checked ${(performance.now() - started).toFixed(0)} ms after it was ready`,
  );
});
