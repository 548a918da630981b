/**
 * An engine across the network, as a fleet's engine StatefulSet is (docs/kubernetes.md): TLS
 * both ways with client certificates from `DOCKER_CERT_PATH`. The test's engine is the real one
 * behind a TLS terminator on 127.0.0.1 that demands a client certificate of its own CA (as
 * `dockerd --tlsverify` does), with certificates made here by openssl. A server reaches it by
 * `tcp://` with the certificates and runs a command through it (agent output through the
 * engine: no shared socket directory); without certificates, or with another CA's, it cannot.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Socket } from 'node:net';
import { createServer } from 'node:tls';
import { promisify } from 'node:util';
import { createDockerClient } from '../../src/backends/docker/engine/engine-client.ts';
import { freePort } from '../support/free-port.ts';
import { sleep } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';

const run = promisify(execFile);
const ROOT = new URL('../..', import.meta.url).pathname;
const ENGINE_SOCKET = process.env.DOCKER_HOST?.startsWith('unix://')
  ? process.env.DOCKER_HOST.slice('unix://'.length)
  : '/var/run/docker.sock';

/** A CA, a server certificate for 127.0.0.1 and a client certificate, in `dir` (docker's file names). */
async function makeCerts(dir: string): Promise<void> {
  const ssl = (...args: string[]) => run('openssl', args, { cwd: dir });
  const newKey = ['-newkey', 'rsa:2048', '-nodes'];
  await ssl('req', '-x509', ...newKey, '-days', '1', '-subj', '/CN=test-ca', '-keyout', 'ca-key.pem', '-out', 'ca.pem');
  const signed = [
    ['server', 'server-key.pem', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth'],
    ['cert', 'key.pem', 'extendedKeyUsage=clientAuth'],
  ] as const;
  for (const [name, key, ext] of signed) {
    await writeFile(join(dir, `${name}.ext`), `${ext}\n`);
    await ssl('req', ...newKey, '-subj', `/CN=${name}`, '-keyout', key, '-out', `${name}.csr`);
    await ssl(
      ...['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca-key.pem', '-CAcreateserial'],
      ...['-days', '1', '-out', `${name}.pem`, '-extfile', `${name}.ext`],
    );
  }
}

/** The real engine behind TLS that requires a client certificate of `dir`'s CA. */
async function tlsEngine(dir: string, port: number): Promise<{ close(): Promise<void> }> {
  const open = new Set<Socket>();
  const server = createServer(
    {
      key: await readFile(join(dir, 'server-key.pem')),
      cert: await readFile(join(dir, 'server.pem')),
      ca: await readFile(join(dir, 'ca.pem')),
      requestCert: true,
      rejectUnauthorized: true,
    },
    (socket) => {
      const engine = netConnect(ENGINE_SOCKET);
      open.add(socket);
      socket.once('close', () => open.delete(socket));
      socket.pipe(engine).pipe(socket);
      const end = (): void => {
        socket.destroy();
        engine.destroy();
      };
      socket.on('error', end);
      engine.on('error', end);
      socket.on('close', end);
      engine.on('close', end);
    },
  );
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return {
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        for (const s of open) s.destroy();
      }),
  };
}

test('an engine over tcp:// with TLS client certificates: reached with them, refused without', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 120_000,
}, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'exec-server-tls-'));
  const other = await mkdtemp(join(tmpdir(), 'exec-server-tls-other-'));
  t.after(() => Promise.all([rm(dir, { recursive: true }), rm(other, { recursive: true })]));
  await makeCerts(dir);
  await makeCerts(other);
  const port = await freePort();
  const engine = await tlsEngine(dir, port);
  let server: ChildProcess | undefined;
  // The server stops before the engine's TLS front closes: stopped later, it could not reach the
  // engine to remove its warm-pool containers, which would outlive the test.
  t.after(async () => {
    if (server !== undefined && server.exitCode === null) {
      const gone = new Promise((r) => server?.once('exit', r));
      server.kill('SIGTERM');
      await gone;
    }
    await engine.close();
  });
  const host = `tcp://127.0.0.1:${port}`;

  const ping = (env: NodeJS.ProcessEnv) =>
    createDockerClient(host, env)
      .ping()
      .then((r) => String(r));
  assert.equal(await ping({ DOCKER_CERT_PATH: dir }), 'OK', 'with the client certificate');
  await assert.rejects(ping({}), 'plain tcp:// to a TLS engine');
  await assert.rejects(ping({ DOCKER_TLS_VERIFY: '1' }), 'TLS without a client certificate');
  await assert.rejects(ping({ DOCKER_CERT_PATH: other }), 'a certificate of another CA');

  // A whole server on that engine: sessions, and command output through the engine over TLS.
  const listen = await freePort();
  const args = ['--import', 'tsx', 'src/main.ts', 'serve', '--backend', 'docker', '--image', TEST_IMAGE];
  args.push('--docker-host', host, '--listen', `ws://127.0.0.1:${listen}`);
  args.push('--instance-id', `tls-${process.pid}-${Date.now()}`, '--log-level', 'warn');
  const child = spawn(process.execPath, args, {
    stdio: ['ignore', 'ignore', 'inherit'],
    cwd: ROOT,
    env: { ...process.env, DOCKER_HOST: undefined, DOCKER_CERT_PATH: dir },
  });
  server = child;
  for (let i = 0; i < 600; i++) {
    const ok = await fetch(`http://127.0.0.1:${listen}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    assert.equal(child.exitCode, null, 'the server runs');
    await sleep(100);
  }
  // The client in a process of its own, as a user runs it (the test process serves the engine).
  const cli = await run(
    process.execPath,
    [
      '--import',
      'tsx',
      'src/main.ts',
      'run',
      '--url',
      `ws://127.0.0.1:${listen}`,
      '--',
      'sh',
      '-c',
      'echo over-tls; exit 3',
    ],
    { cwd: ROOT, timeout: 60_000 },
  ).catch((err: { code?: number; stdout?: string }) => err);
  assert.equal(cli.stdout, 'over-tls\n');
  assert.equal((cli as { code?: number }).code, 3, 'the real exit code');
});
