/**
 * Session runtimes against a real engine: a runsc session really runs under gVisor, every
 * surface says which runtime a session has, bad runtimes are clear errors (at startup for the
 * default, at creation for a session), and the warm pool keeps containers per runtime.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { dockerTestOptions } from '../docker/engine.ts';
import { docker, makeBackend, poolContainerIds, RecordingSink, sessionSpec, spawnRequest } from '../docker/helpers.ts';
import { startServer, TestSession } from '../support/harness.ts';

async function run(
  session: { spawn: import('../../src/backends/types.ts').BackendSession['spawn'] },
  script: string,
): Promise<string> {
  const sink = new RecordingSink();
  await session.spawn(spawnRequest(['sh', '-c', script]), sink);
  const exit = await sink.exited;
  assert.deepEqual(exit, { kind: 'exited', code: 0 }, sink.text());
  return sink.text('stdout');
}

test('a runsc session runs under gVisor; a runc session does not', dockerTestOptions, async (t) => {
  const backend = makeBackend({ allowedRuntimes: ['runsc'] });
  t.after(() => backend.close());
  const [gvisor, plain] = await Promise.all([
    backend.createSession(sessionSpec({ runtime: 'runsc' })),
    backend.createSession(sessionSpec({ runtime: 'runc' })),
  ]);
  assert.equal(gvisor.runtime, 'runsc');
  assert.equal(plain.runtime, 'runc');
  assert.equal((await docker('inspect', '-f', '{{.HostConfig.Runtime}}', gvisor.containerId!)).trim(), 'runsc');
  // gVisor's own kernel reports 4.4.0 and says so in its boot log; the host kernel does neither.
  const inside = await run(gvisor, 'uname -r; dmesg 2>/dev/null | head -n 3');
  assert.match(inside, /^4\.4\.0\n/);
  assert.match(inside, /gVisor/);
  const host = await run(plain, 'uname -r');
  assert.notEqual(host.trim(), '4.4.0');
  assert.equal(host.trim(), (await import('node:os')).release());
});

test(
  'session/info and the HTTP session report the runtime; the default is the engine default',
  dockerTestOptions,
  async (t) => {
    const server = await startServer({ backend: 'docker', flags: ['--allowed-runtimes', 'runsc'] });
    t.after(() => server.close());
    const ws = await TestSession.open(server.url, { session: { runtime: 'runsc' } });
    t.after(() => ws.close());
    const info = await ws.request('session/info', {});
    assert.equal(info['runtime'], 'runsc');
    assert.equal(info['hibernation'], 'awake');
    assert.equal((ws.initResult['capabilities'] as Record<string, unknown>)['hibernation'], true);
    const created = await fetch(`${server.httpUrl}/v1/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(created.status, 201);
    const body = (await created.json()) as Record<string, unknown>;
    const engineDefault = (await docker('info', '-f', '{{.DefaultRuntime}}')).trim();
    assert.equal(body['runtime'], engineDefault);
    const listed = (await (await fetch(`${server.httpUrl}/v1/sessions/${String(body['sessionId'])}`)).json()) as Record<
      string,
      unknown
    >;
    assert.equal(listed['runtime'], engineDefault);
  },
);

test('runtimes that are not allowed or not registered are clear errors', dockerTestOptions, async (t) => {
  const server = await startServer({ backend: 'docker', flags: ['--allowed-runtimes', 'runsc,no-such-runtime'] });
  t.after(() => server.close());
  const post = async (spec: unknown): Promise<{ status: number; body: Record<string, unknown> }> => {
    const res = await fetch(`${server.httpUrl}/v1/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(spec),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  const denied = await post({ runtime: 'kata' });
  assert.equal(denied.status, 400);
  assert.equal(denied.body['code'], 'EXEC_ERR_INVALID_PARAMS');
  assert.match(
    String(denied.body['message']),
    /session\.runtime kata is not allowed on this server \(allowed: runc, runsc, no-such-runtime/,
  );
  const missing = await post({ runtime: 'no-such-runtime' });
  assert.equal(missing.status, 500);
  assert.equal(missing.body['code'], 'EXEC_ERR_CONFIG');
  assert.match(
    String(missing.body['message']),
    /no-such-runtime is allowed here but not registered with the engine; it has: .*runsc/,
  );
  const malformed = await post({ runtime: '../x' });
  assert.equal(malformed.status, 400);
  assert.equal(malformed.body['code'], 'EXEC_ERR_INVALID_PARAMS');
});

test('a default runtime the engine lacks fails startup with a clear error', dockerTestOptions, async () => {
  const backend = makeBackend({ runtime: 'no-such-runtime' });
  try {
    await assert.rejects(backend.recover(), (err: Error & { code?: string }) => {
      assert.equal(err.code, 'EXEC_ERR_CONFIG');
      assert.match(
        err.message,
        /docker runtime no-such-runtime \(--runtime\) is not registered with the engine; it has: .*runc.*runsc/,
      );
      return true;
    });
  } finally {
    await backend.close();
  }
});

test('session.runtime on the local backend is a clear error', async (t) => {
  const server = await startServer({ backend: 'local' });
  t.after(() => server.close());
  const res = await fetch(`${server.httpUrl}/v1/sessions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ runtime: 'runsc' }),
  });
  assert.equal(res.status, 400);
  const body = (await res.json()) as Record<string, unknown>;
  assert.match(String(body['message']), /session\.runtime applies to the docker backend only/);
});

test('the warm pool keeps containers per runtime and hands them to matching sessions', dockerTestOptions, async (t) => {
  const backend = makeBackend({ allowedRuntimes: ['runsc'], warmPoolSize: 1, warmPoolRuntimes: { runsc: 1 } });
  t.after(() => backend.close());
  assert.equal(await backend.poolFull(60_000), true, 'both pools filled');
  assert.equal(backend.poolReady('runc'), 1);
  assert.equal(backend.poolReady('runsc'), 1);
  const pooled = await poolContainerIds(backend);
  const gvisor = await backend.createSession(sessionSpec({ runtime: 'runsc' }));
  assert.ok(pooled.includes(gvisor.containerId!), 'the runsc session got the runsc pool container');
  assert.equal((await docker('inspect', '-f', '{{.HostConfig.Runtime}}', gvisor.containerId!)).trim(), 'runsc');
  assert.equal(backend.poolReady('runc'), 1, 'the runc pool was not touched');
  const plain = await backend.createSession(sessionSpec());
  assert.ok(pooled.includes(plain.containerId!), 'the default-runtime session got the runc pool container');
  assert.equal(plain.runtime, 'runc');
  assert.match(await run(gvisor, 'uname -r'), /^4\.4\.0/);
});

test(
  'the server refuses to start with such a default runtime (exit 2, the reason on stderr)',
  dockerTestOptions,
  async () => {
    const { spawnSync } = await import('node:child_process');
    const main = new URL('../../src/main.ts', import.meta.url).pathname;
    const r = spawnSync(
      process.execPath,
      [
        '--import',
        'tsx',
        main,
        'serve',
        '--backend',
        'docker',
        '--runtime',
        'no-such-runtime',
        '--listen',
        'ws://127.0.0.1:0',
        '--log-level',
        'silent',
      ],
      { encoding: 'utf8', timeout: 60_000 },
    );
    assert.equal(r.status, 2, r.stderr);
    assert.match(
      r.stderr,
      /exec-server: invalid configuration: docker runtime no-such-runtime \(--runtime\) is not registered with the engine/,
    );
  },
);
