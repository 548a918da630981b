/**
 * A rollout (docs/kubernetes.md, "Rollouts"): a real server process started with
 * `--shutdown-sessions keep` gets SIGTERM while a command streams. Its client is told to go
 * (`server/draining`, close code 1012), the server fails `/readyz` while it drains, the command
 * keeps running in its container with no server at all, and once the next server of the instance
 * listens at the same address (a Service in front of a fleet) the SDK resumes by itself: the
 * handle reads every byte once, in order, and the real exit code.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { test } from 'node:test';
import Docker from 'dockerode';
import { ExecServerClient } from '../../src/client/client.ts';
import type { DrainingNotification } from '../../src/protocol/index.ts';
import { freePort } from '../support/free-port.ts';
import { sleep } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';

const ROOT = new URL('../..', import.meta.url).pathname;

function spawnServer(instanceId: string, port: number): ChildProcess {
  const args = ['--import', 'tsx', 'src/main.ts', 'serve', '--backend', 'docker', '--image', TEST_IMAGE];
  args.push('--instance-id', instanceId, '--listen', `ws://127.0.0.1:${port}`, '--log-level', 'warn');
  args.push('--shutdown-sessions', 'keep');
  return spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'inherit'], cwd: ROOT });
}

async function readyz(port: number): Promise<number | undefined> {
  return fetch(`http://127.0.0.1:${port}/readyz`).then(
    (r) => r.status,
    () => undefined,
  );
}

async function untilReady(port: number, child: ChildProcess): Promise<void> {
  // Generous: on a loaded CI machine a server's boot (tsx, adopting the containers) is slow.
  for (let i = 0; i < 1200 && child.exitCode === null; i++) {
    if ((await readyz(port)) === 200) return;
    await sleep(100);
  }
  throw new Error(`server on ${port} did not become ready`);
}

const LINES = 120;
const SCRIPT = `i=0; while [ $i -lt ${LINES} ]; do echo line-$i; i=$((i+1)); sleep 0.05; done; exit 7`;

test('SIGTERM in a rollout: the client is told to reconnect (1012), the command runs on, the SDK resumes on the next server', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 120_000,
}, async (t) => {
  const instanceId = `rollout-${process.pid}-${Date.now()}`;
  const port = await freePort();
  const url = `ws://127.0.0.1:${port}`;
  const children: ChildProcess[] = [];
  t.after(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
    await Promise.all(children.map((c) => (c.exitCode === null ? new Promise((r) => c.once('exit', r)) : undefined)));
  });
  const first = spawnServer(instanceId, port);
  children.push(first);
  await untilReady(port, first);

  const notices: DrainingNotification[] = [];
  const closes: number[] = [];
  const client = await ExecServerClient.connect(url, {
    session: { sandbox: { type: 'danger-full-access' } },
    onDraining: (n) => notices.push(n),
  });
  t.after(() => client.disconnect());
  client.onDisconnect(({ code }) => closes.push(code));
  const containerId = (await client.sessionInfo()).containerId;
  assert.ok(containerId, 'the session has a container');
  const handle = await client.exec(['sh', '-c', SCRIPT], { check: false });
  let streamed = '';
  handle.onOutput((c) => {
    streamed += c.text;
  });
  while (!streamed.includes('line-10\n')) await sleep(20);

  const firstGone = new Promise<number | null>((r) => first.once('exit', (code) => r(code)));
  first.kill('SIGTERM');
  // Readiness fails first, while the server is still up to tell its clients.
  let sawDraining = false;
  for (let i = 0; i < 100 && !sawDraining; i++) {
    const status = await readyz(port);
    if (status === 503) sawDraining = true;
    if (status === undefined) break;
    await sleep(10);
  }
  assert.equal(await firstGone, 0, 'the draining server exits cleanly');
  assert.ok(sawDraining, '/readyz answered 503 while the server drained');
  assert.equal(notices.length, 1, 'one server/draining notification');
  assert.equal(notices[0]?.reconnect, true);
  assert.deepEqual(closes, [1012], 'the connection closed with 1012 (service restart)');
  assert.equal(client.connected, false);

  // No server at all now: the container and the command in it run on.
  const docker = new Docker(process.env.DOCKER_HOST ? undefined : { socketPath: '/var/run/docker.sock' });
  const state = await docker.getContainer(containerId).inspect();
  assert.equal(state.State.Running, true, 'the session container outlived its server');
  const top = (await docker.getContainer(containerId).top({ ps_args: '-eo pid,args' })) as { Processes: string[][] };
  assert.ok(
    top.Processes.some((p) => p.join(' ').includes('line-')),
    'the command still runs in its container',
  );

  // The next server of the instance at the same address (as behind a Service); the SDK resumes.
  const second = spawnServer(instanceId, port);
  children.push(second);
  const result = await handle.wait();
  const expected = Array.from({ length: LINES }, (_, i) => `line-${i}\n`).join('');
  assert.equal(result.stdout, expected, 'every byte once, in order, across the rollout');
  assert.equal(result.exitCode, 7, 'the real exit code');
  assert.equal(streamed, expected);
  assert.equal(client.connected, true, 'the SDK resumed on the next server by itself');
  await client.deleteSession();
});
