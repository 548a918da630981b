/**
 * The server image on a read-only root filesystem with only /tmp writable (docs/kubernetes.md),
 * run exactly as a first-time user runs it: the default (local) backend, no flags about where
 * state goes. It must start, serve a session that runs a command, and keep its workspaces under
 * /tmp (the home directory cannot be written). A workspace root that cannot be made stops the
 * start with exit 2 and a message naming the flag that moves it.
 *
 * Under CI=true a missing engine or image fails; elsewhere the tests are skipped with the reason.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, test } from 'node:test';
import { docker, imageMissingReason as reason, run, SERVER_IMAGE, serverImageTestOptions } from './server-image.ts';

const name = `exec-server-ro-test-${randomBytes(4).toString('hex')}`;

const opts = serverImageTestOptions(150_000);

after(async () => {
  if (reason === undefined) await run('docker', ['rm', '-f', name]).catch(() => undefined);
});

async function logs(): Promise<string> {
  const { stdout, stderr } = await run('docker', ['logs', name]).catch((err: Error) => ({
    stdout: `(no logs: ${err.message})`,
    stderr: '',
  }));
  return stdout + stderr;
}

test('read-only root, /tmp a tmpfs: the default backend starts and runs a command', opts, async () => {
  // The command line of the report, the port published on the loopback.
  await docker(
    'run',
    '-d',
    '--name',
    name,
    '--read-only',
    '--tmpfs',
    '/tmp',
    '-p',
    '127.0.0.1::8765',
    SERVER_IMAGE,
    'serve',
    '--listen',
    'ws://0.0.0.0:8765',
    '--insecure-no-auth',
    '--sandbox',
    'danger-full-access',
  );
  const port = (await docker('port', name, '8765/tcp')).split('\n')[0]?.split(':').pop();
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 90_000;
  for (;;) {
    const ok = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(2000) }).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    const state = await docker('inspect', '-f', '{{.State.Status}}', name);
    if (state !== 'running') throw new Error(`the server container is ${state}:\n${await logs()}`);
    if (Date.now() > deadline) throw new Error(`no /healthz after 90 s:\n${await logs()}`);
    await new Promise((r) => setTimeout(r, 250));
  }
  const post = async (path: string, body: unknown): Promise<Record<string, unknown>> => {
    const res = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    const json = (await res.json()) as Record<string, unknown>;
    assert.ok(res.ok, `${path}: ${res.status} ${JSON.stringify(json)}`);
    return json;
  };
  const session = await post('/v1/sessions', {});
  const workdir = String(session['workdir']);
  assert.match(workdir, /^\/tmp\/exec-server-10001\/workspaces\//, 'workspaces go under /tmp');
  const id = String(session['sessionId']);
  const out = await post(`/v1/sessions/${id}/exec_command`, { cmd: 'pwd; echo hi > f; cat f', yield_time_ms: 5000 });
  assert.equal(out['exit_code'], 0, JSON.stringify(out));
  assert.equal(out['output'], `${workdir}\nhi\n`);
});

test('a workspace root that cannot be made: exit 2, the message names --workspace-root', opts, async () => {
  const res = await run(
    'docker',
    ['run', '--rm', '--read-only', '--tmpfs', '/tmp', SERVER_IMAGE, 'serve', '--listen', 'ws://127.0.0.1:0'].concat([
      '--insecure-no-auth',
      '--workspace-root',
      '/srv/workspaces',
    ]),
    { timeout: 90_000 },
  ).then(
    () => ({ code: 0, stderr: '' }),
    (err: { code?: number; stderr?: string }) => ({ code: err.code, stderr: err.stderr ?? '' }),
  );
  assert.equal(res.code, 2, res.stderr);
  assert.match(
    res.stderr,
    /cannot make the workspace root \/srv\/workspaces \((EROFS|ENOENT|EACCES).*--workspace-root/,
  );
});
