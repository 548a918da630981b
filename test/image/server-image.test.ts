/**
 * The server image (built from the Dockerfile by scripts/build-server-image.sh) run as an
 * operator runs it: non-root, read-only root filesystem, every capability dropped, the host
 * engine's socket mounted, the docker backend. It must answer /healthz and /readyz, run a
 * command in a session container, and on `docker stop` end its sessions (running command
 * included, container removed) and exit 0 within the shutdown grace.
 *
 * Under CI=true a missing engine or image fails; elsewhere the tests are skipped with the reason.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { IN_CI, TEST_IMAGE } from '../docker/engine.ts';
import { docker, imageMissingReason as reason, run, SERVER_IMAGE, serverImageTestOptions } from './server-image.ts';
import { freePort } from '../support/free-port.ts';

const SOCKET = '/var/run/docker.sock';
const GRACE_MS = 8000;
const UID = '10001';

const opts = serverImageTestOptions(120_000);

const suffix = randomBytes(4).toString('hex');
const name = `exec-server-image-test-${suffix}`;
const instanceId = `image-test-${suffix}`;
const token = randomBytes(24).toString('hex');
let base = '';

async function http(
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  return { status: res.status, json: text === '' ? {} : (JSON.parse(text) as Record<string, unknown>) };
}

async function sessionContainers(): Promise<string[]> {
  const out = await docker('ps', '-a', '--filter', `label=exec-server.instance=${instanceId}`, '--format', '{{.ID}}');
  return out === '' ? [] : out.split('\n');
}

async function logs(): Promise<string> {
  try {
    const { stdout, stderr } = await run('docker', ['logs', name], { timeout: 30_000, maxBuffer: 16 * 1024 * 1024 });
    return stdout + stderr;
  } catch (err) {
    return `(no logs: ${(err as Error).message})`;
  }
}

before(async () => {
  if (reason !== undefined) return;
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  // --network host: the server listens on the host's loopback only, and no traffic goes to a
  // bridge address. The socket's group is added the way the chart adds docker.socketGid.
  await docker(
    'run',
    '-d',
    '--name',
    name,
    '--network',
    'host',
    '--read-only',
    '--tmpfs',
    '/tmp:rw,nosuid,nodev,size=64m',
    '--cap-drop',
    'ALL',
    '--security-opt',
    'no-new-privileges',
    '--group-add',
    String(statSync(SOCKET).gid),
    '-v',
    `${SOCKET}:${SOCKET}`,
    '-e',
    `EXEC_SERVER_TOKEN=${token}`,
    '-e',
    `EXEC_SERVER_IMAGE=${TEST_IMAGE}`,
    '-e',
    `EXEC_SERVER_INSTANCE_ID=${instanceId}`,
    '-e',
    `EXEC_SERVER_SHUTDOWN_GRACE_MS=${GRACE_MS}`,
    SERVER_IMAGE,
    'serve',
    '--listen',
    `ws://127.0.0.1:${port}`,
    '--backend',
    'docker',
  );
  // tsx compiles the sources at start; a loaded 2-core machine can take a while.
  const deadline = Date.now() + 90_000;
  for (;;) {
    try {
      if ((await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(2000) })).ok) break;
    } catch {
      // not listening yet
    }
    const state = await docker('inspect', '-f', '{{.State.Status}}', name);
    if (state !== 'running') throw new Error(`the server container is ${state}:\n${await logs()}`);
    if (Date.now() > deadline) throw new Error(`no /healthz after 90 s:\n${await logs()}`);
    await new Promise((r) => setTimeout(r, 250));
  }
});

after(async () => {
  if (reason !== undefined) return;
  await run('docker', ['rm', '-f', name]).catch(() => undefined);
  const left = await sessionContainers().catch(() => []);
  if (left.length > 0) await run('docker', ['rm', '-f', ...left]).catch(() => undefined);
});

test('the image carries its OCI labels, runs as the non-root user, on a read-only root', opts, async () => {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  const labels = JSON.parse(await docker('image', 'inspect', '-f', '{{json .Config.Labels}}', SERVER_IMAGE)) as Record<
    string,
    string
  >;
  assert.equal(labels['org.opencontainers.image.version'], pkg.version);
  assert.equal(labels['org.opencontainers.image.title'], 'exec-server');
  assert.equal(labels['org.opencontainers.image.licenses'], 'Apache-2.0');
  assert.match(labels['org.opencontainers.image.revision'] ?? '', /^[0-9a-f]{40}$/);
  // Empty, or a public https address: never a local path, a user name or a token.
  assert.match(labels['org.opencontainers.image.source'] ?? 'absent', /^(|https:\/\/[^/@\s]+(\/\S*)?)$/);
  if (IN_CI) {
    const head = (await run('git', ['rev-parse', 'HEAD'])).stdout.trim();
    assert.equal(labels['org.opencontainers.image.revision'], head, 'CI tests the image of the commit under test');
  }
  assert.equal(await docker('image', 'inspect', '-f', '{{.Config.User}}', SERVER_IMAGE), `${UID}:${UID}`);

  assert.equal(await docker('inspect', '-f', '{{.HostConfig.ReadonlyRootfs}}', name), 'true');
  assert.equal(await docker('exec', name, 'id', '-u'), UID);
  // The server process itself (under tini, PID 1) is the non-root user.
  const serverUid = await docker(
    'exec',
    name,
    'sh',
    '-c',
    'for p in /proc/[0-9]*; do grep -q exec-server "$p/cmdline" 2>/dev/null && stat -c %u "$p"; done | sort -u',
  );
  assert.equal(serverUid, UID);
  await assert.rejects(docker('exec', name, 'touch', '/app/src/written'), /Read-only file system/);
  await assert.rejects(docker('exec', name, 'touch', '/home/exec-server/written'), /Read-only file system/);
  await docker('exec', name, 'touch', '/tmp/written');
});

test('/healthz and /readyz answer (backend docker), the API needs the token, the console is served', opts, async () => {
  const health = await fetch(`${base}/healthz`);
  assert.equal(health.status, 200);
  const ready = await fetch(`${base}/readyz`);
  assert.equal(ready.status, 200);
  assert.deepEqual(await ready.json(), { status: 'ready', backend: 'docker' });
  assert.equal((await fetch(`${base}/v1/sessions`)).status, 401, 'the API needs the token');
  const page = await fetch(`${base}/console/`);
  assert.equal(page.status, 200, 'the web console is bundled into the image');
  assert.match(await page.text(), /<script[^>]+src=/);
});

test('a session on the host engine runs a command; docker stop ends it within the grace', opts, async () => {
  const created = await http('POST', '/v1/sessions', {});
  assert.equal(created.status, 201, JSON.stringify(created.json));
  assert.equal(created.json['backend'], 'docker');
  const id = String(created.json['sessionId']);
  const exec = await http('POST', `/v1/sessions/${id}/exec_command`, {
    cmd: 'echo "from $(hostname)"; echo done-$((6 * 7))',
    yield_time_ms: 10_000,
  });
  assert.equal(exec.status, 200, JSON.stringify(exec.json));
  assert.equal(exec.json['exit_code'], 0);
  assert.match(String(exec.json['output']), /^done-42$/m);
  const sessionContainer = String(created.json['containerId']);
  // The session's container, beside the warm pool's ready ones (at least its minimum, 2 by default).
  const running = await sessionContainers();
  assert.ok(running.includes(sessionContainer.slice(0, 12)), `the session's container runs: ${running.join(', ')}`);

  // A command still running at shutdown: the server must end it and remove the container.
  const long = await http('POST', `/v1/sessions/${id}/exec_command`, {
    cmd: 'echo started; sleep 600',
    yield_time_ms: 500,
  });
  assert.equal(long.status, 200, JSON.stringify(long.json));
  assert.equal(typeof long.json['session_id'], 'number', 'the command is still running');

  const started = Date.now();
  await docker('stop', '-t', String(GRACE_MS / 1000 + 20), name);
  const took = Date.now() - started;
  const exitCode = await docker('inspect', '-f', '{{.State.ExitCode}}', name);
  const text = await logs();
  assert.equal(exitCode, '0', `graceful exit, not killed (took ${took} ms):\n${text}`);
  assert.ok(took < GRACE_MS, `stopped within the shutdown grace (${took} ms < ${GRACE_MS} ms)`);
  assert.match(text, /"signal":"SIGTERM","sessions":"ended","msg":"shutting down"/);
  assert.match(text, /"why":"server shutdown","msg":"session destroyed"/);
  assert.deepEqual(await sessionContainers(), [], 'the session container and the warm pool are removed');
});
