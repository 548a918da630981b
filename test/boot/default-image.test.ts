/**
 * The docker backend without its default image: `/readyz` answers 503 with the reason and the
 * fix (a pull is tried first, in the background), boot says the same in the log, and the server
 * becomes ready once the image exists, without a restart. Against a real engine.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildApp } from '../../src/app.ts';
import { createDockerBackend } from '../../src/backends/docker/index.ts';
import { loadConfig } from '../../src/config.ts';
import { silentLogger } from '../../src/logger.ts';
import { dockerTestOptions, TEST_IMAGE } from '../docker/engine.ts';
import { execFileP } from '../docker/helpers.ts';

const main = fileURLToPath(new URL('../../src/main.ts', import.meta.url));

async function readyz(
  app: Awaited<ReturnType<typeof buildApp>>,
): Promise<{ status: number; body: { message?: string; status?: string } }> {
  const r = await app.inject({ method: 'GET', url: '/readyz' });
  return { status: r.statusCode, body: r.json() };
}

test('readyz: a missing default image is not ready, with the reason, until it exists', {
  ...dockerTestOptions,
  timeout: 120_000,
}, async (t) => {
  const image = `exec-server-missing-${randomUUID().slice(0, 8)}:latest`;
  const config = loadConfig(['--backend', 'docker', '--image', image], {});
  const backend = createDockerBackend(
    { defaultImage: image, instanceId: `test-${randomUUID().slice(0, 8)}` },
    silentLogger,
  );
  const app = await buildApp({ config, backend });
  t.after(async () => {
    await app.close();
    await execFileP('docker', ['image', 'rm', image]).catch(() => undefined);
  });
  const first = await readyz(app);
  assert.equal(first.status, 503);
  assert.match(
    first.body.message ?? '',
    new RegExp(`default image ${image} is (missing locally; pulling it|being pulled)`),
  );
  // No registry answers here (or the name does not exist there): the pull fails, and says why.
  let after = first;
  const deadline = Date.now() + 60_000;
  while (/pull(ing|ed) it|being pulled/.test(after.body.message ?? '') && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 250));
    after = await readyz(app);
  }
  assert.equal(after.status, 503);
  assert.match(
    after.body.message ?? '',
    new RegExp(
      `default image ${image} is missing and cannot be pulled \\(.+\\); pull or build it, or choose another image with --image`,
    ),
  );
  // Once the image exists the same server is ready.
  await execFileP('docker', ['tag', TEST_IMAGE, image]);
  const ready = await readyz(app);
  assert.equal(ready.status, 200);
  assert.equal(ready.body.status, 'ready');
});

test('boot: the server listens, and its log says the default image is missing, the pull tried and why it failed', {
  ...dockerTestOptions,
  timeout: 120_000,
}, async () => {
  const image = `exec-server-missing-${randomUUID().slice(0, 8)}:latest`;
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      main,
      '--backend',
      'docker',
      '--image',
      image,
      '--listen',
      'ws://127.0.0.1:0',
      '--log-format',
      'json',
      '--instance-id',
      `test-${randomUUID().slice(0, 8)}`,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += String(d)));
  child.stderr.on('data', (d) => (stderr += String(d)));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    const deadline = Date.now() + 90_000;
    while (!/cannot be pulled/.test(stderr) && Date.now() < deadline && child.exitCode === null)
      await new Promise((r) => setTimeout(r, 100));
    assert.match(stdout, /^ws:\/\/127\.0\.0\.1:\d+\n$/, 'it listens');
    const lines = stderr
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { level: number; msg: string });
    assert.ok(
      lines.some(
        (l) => l.level === 40 && l.msg.includes(`not ready: default image ${image} is missing locally; pulling it`),
      ),
      stderr,
    );
    assert.ok(
      lines.some(
        (l) => l.level === 40 && new RegExp(`default image ${image} is missing and cannot be pulled`).test(l.msg),
      ),
      stderr,
    );
    const base = stdout.trim().replace(/^ws:/, 'http:');
    const r = await fetch(`${base}/readyz`);
    assert.equal(r.status, 503);
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
});
