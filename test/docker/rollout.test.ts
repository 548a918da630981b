/**
 * A rollout (docs/kubernetes.md, "Graceful shutdown"): a real server process started with
 * `--shutdown-sessions keep` gets SIGTERM while a command streams. Its client is told to go
 * (`server/draining`, close code 1012), the server fails `/readyz` while it drains, the command
 * keeps running in its container with no server at all, and once the next server of the instance
 * listens at the same address (a Service in front of a fleet) the SDK resumes by itself: the
 * handle reads every byte once, in order, and the real exit code.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, connect as netConnect, type Socket } from 'node:net';
import { type TestContext, test } from 'node:test';
import Docker from 'dockerode';
import { ExecServerClient } from '../../src/client/client.ts';
import type { ExecHandle } from '../../src/client/process-handle.ts';
import type { DrainingNotification } from '../../src/protocol/index.ts';
import { freePort } from '../support/free-port.ts';
import { sleep } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';

const ROOT = new URL('../..', import.meta.url).pathname;

/** A server of `instanceId` on `port`: `--shutdown-sessions keep` alone, or a replica of a fleet. */
function spawnServer(instanceId: string, port: number, replica?: string): ChildProcess {
  const args = ['--import', 'tsx', 'src/main.ts', 'serve', '--backend', 'docker', '--image', TEST_IMAGE];
  args.push('--instance-id', instanceId, '--listen', `ws://127.0.0.1:${port}`, '--log-level', 'warn');
  if (replica === undefined) args.push('--shutdown-sessions', 'keep');
  else args.push('--fleet', '--replica-id', replica);
  return spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'inherit'], cwd: ROOT });
}

/**
 * A Service in front of servers: each new connection goes to the first of `ports` whose
 * `/readyz` answered 200 at the last check (every 100 ms), as kube-proxy sends connections to
 * ready endpoints only. Connections already made stay where they are.
 */
async function service(ports: readonly number[]): Promise<{ port: number; close(): Promise<void> }> {
  const ready = new Set<number>();
  const timer = setInterval(() => {
    for (const p of ports) void readyz(p).then((s) => (s === 200 ? ready.add(p) : ready.delete(p)));
  }, 100);
  const open = new Set<Socket>();
  const server = createServer((socket) => {
    const target = ports.find((p) => ready.has(p));
    if (target === undefined) return void socket.destroy();
    const upstream = netConnect(target, '127.0.0.1');
    for (const s of [socket, upstream]) {
      open.add(s);
      s.once('close', () => {
        open.delete(s);
        socket.destroy();
        upstream.destroy();
      });
      s.on('error', () => undefined);
    }
    socket.pipe(upstream).pipe(socket);
  });
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  // Every replica ready before the first connection, so that it goes to the first one (the
  // tests count on it): not merely whichever answered its first readiness probe sooner.
  while (!ports.every((p) => ready.has(p))) await sleep(50);
  return {
    port,
    close: () =>
      new Promise<void>((r) => {
        clearInterval(timer);
        server.close(() => r());
        for (const s of open) s.destroy();
      }),
  };
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
const EXPECTED = Array.from({ length: LINES }, (_, i) => `line-${i}\n`).join('');

const engine = (): Docker => new Docker(process.env.DOCKER_HOST ? undefined : { socketPath: '/var/run/docker.sock' });

/**
 * Every server the test started ends with it; SIGTERM keeps the sessions here, so what is left
 * of the instance (a failed test's session, a claim) is removed after them.
 */
function track(t: TestContext, instanceId: string): (child: ChildProcess) => ChildProcess {
  const children: ChildProcess[] = [];
  t.after(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
    await Promise.all(children.map((c) => (c.exitCode === null ? new Promise((r) => c.once('exit', r)) : undefined)));
    const labels = ['instance', 'claim-instance', 'quota-instance'].map((l) => `exec-server.${l}=${instanceId}`);
    for (const label of labels) {
      const left = await engine().listContainers({ all: true, filters: { label: [label] } });
      await Promise.all(
        left.map((c) =>
          engine()
            .getContainer(c.Id)
            .remove({ force: true })
            .catch(() => undefined),
        ),
      );
    }
  });
  return (child) => {
    children.push(child);
    return child;
  };
}

interface Streaming {
  readonly client: ExecServerClient;
  readonly handle: ExecHandle;
  readonly containerId: string;
  readonly notices: DrainingNotification[];
  readonly closes: number[];
  streamed(): string;
}

/** A client on `url` with a command streaming (at line 10 when this returns). */
async function streaming(t: TestContext, url: string): Promise<Streaming> {
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
  let text = '';
  handle.onOutput((c) => {
    text += c.text;
  });
  while (!text.includes('line-10\n')) await sleep(20);
  return { client, handle, containerId, notices, closes, streamed: () => text };
}

/** SIGTERM to the server on `port`: readiness fails first, the client is told, 1012, a clean exit. */
async function rollOver(server: ChildProcess, port: number, s: Streaming): Promise<void> {
  const gone = new Promise<number | null>((r) => server.once('exit', (code) => r(code)));
  server.kill('SIGTERM');
  let sawDraining = false;
  for (let i = 0; i < 100 && !sawDraining; i++) {
    const status = await readyz(port);
    if (status === 503) sawDraining = true;
    if (status === undefined) break;
    await sleep(10);
  }
  assert.equal(await gone, 0, 'the draining server exits cleanly');
  assert.ok(sawDraining, '/readyz answered 503 while the server drained');
  assert.equal(s.notices.length, 1, 'one server/draining notification');
  assert.equal(s.notices[0]?.reconnect, true);
  assert.equal(s.closes[0], 1012, 'the connection closed with 1012 (service restart)');
}

/** The session's container runs, with the command in it. */
async function stillRunning(containerId: string): Promise<void> {
  const docker = engine();
  const state = await docker.getContainer(containerId).inspect();
  assert.equal(state.State.Running, true, 'the session container outlived its server');
  const top = (await docker.getContainer(containerId).top({ ps_args: '-eo pid,args' })) as { Processes: string[][] };
  assert.ok(
    top.Processes.some((p) => p.join(' ').includes('line-')),
    'the command still runs in its container',
  );
}

/** The SDK resumed by itself: every byte once, in order, and the real exit code. */
async function readsEverything(s: Streaming): Promise<void> {
  const result = await s.handle.wait();
  assert.equal(result.stdout, EXPECTED, 'every byte once, in order, across the rollout');
  assert.equal(result.exitCode, 7, 'the real exit code');
  assert.equal(s.streamed(), EXPECTED);
  assert.equal(s.client.connected, true, 'the SDK resumed by itself');
  await s.client.deleteSession();
}

const options = { ...dockerTestOptions, timeout: dockerTestOptions.skip ? 1000 : 120_000 };

test(
  'one server, --shutdown-sessions keep: SIGTERM mid-command, the next server at the same address serves it',
  options,
  async (t) => {
    const instanceId = `rollout-${process.pid}-${Date.now()}`;
    const port = await freePort();
    const started = track(t, instanceId);
    const first = started(spawnServer(instanceId, port));
    await untilReady(port, first);
    const s = await streaming(t, `ws://127.0.0.1:${port}`);
    await rollOver(first, port, s);
    assert.equal(s.client.connected, false);
    // No server at all now: the container and the command in it run on.
    await stillRunning(s.containerId);
    started(spawnServer(instanceId, port));
    await readsEverything(s);
  },
);

test(
  'a fleet of two behind a Service: SIGTERM the replica that owns the session, the other serves it',
  options,
  async (t) => {
    const instanceId = `rollout-fleet-${process.pid}-${Date.now()}`;
    const ports = [await freePort(), await freePort()] as const;
    const started = track(t, instanceId);
    const [a, b] = [started(spawnServer(instanceId, ports[0], 'a')), started(spawnServer(instanceId, ports[1], 'b'))];
    await Promise.all([untilReady(ports[0], a), untilReady(ports[1], b)]);
    const svc = await service(ports);
    t.after(() => svc.close());
    // The Service sends new connections to the first ready replica: A makes the session.
    const s = await streaming(t, `ws://127.0.0.1:${svc.port}`);
    await rollOver(a, ports[0], s);
    await stillRunning(s.containerId);
    await readsEverything(s);
    assert.equal(b.exitCode, null, 'B served the session throughout');
  },
);

test('the CLI: `exec-server run` rides through a rollout, output whole, exit code passed on', options, async (t) => {
  const instanceId = `rollout-cli-${process.pid}-${Date.now()}`;
  const port = await freePort();
  const started = track(t, instanceId);
  const first = started(spawnServer(instanceId, port));
  await untilReady(port, first);
  const cli = started(
    spawn(
      process.execPath,
      ['--import', 'tsx', 'src/main.ts', 'run', '--url', `ws://127.0.0.1:${port}`, '--', 'sh', '-c', SCRIPT],
      {
        cwd: ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    ),
  );
  let out = '';
  let err = '';
  cli.stdout!.setEncoding('utf8').on('data', (s: string) => (out += s));
  cli.stderr!.setEncoding('utf8').on('data', (s: string) => (err += s));
  const exited = new Promise<number | null>((r) => cli.once('exit', (code) => r(code)));
  while (!out.includes('line-10\n')) await sleep(20);
  const gone = new Promise((r) => first.once('exit', r));
  first.kill('SIGTERM');
  await gone;
  started(spawnServer(instanceId, port));
  assert.equal(await exited, 7, `the command's exit code\n${err}`);
  assert.equal(out, EXPECTED, 'every line once');
});
