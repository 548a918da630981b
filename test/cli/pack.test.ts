/**
 * The package as a user gets it: `npm pack` (its prepack builds dist/ with tsc and the console),
 * `npm install` of the tarball into an empty project (dependencies from the registry, the
 * native helpers built from their sources by postinstall), then, from plain Node with no
 * loader: the installed `exec-server` command serves, and `exec-server/client` runs commands
 * on it; `exec-server/server` loads; the declarations type-check in the user's project; and
 * the SDK's browser entry bundles for the browser without a Node built-in.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startServerProcess } from '../support/server-process.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const run = promisify(execFile);
/** npm beside the node running the tests. */
const ENV = { ...process.env, PATH: `${dirname(process.execPath)}:${process.env['PATH'] ?? ''}` };

function sh(cmd: string, args: readonly string[], cwd: string, timeout = 300_000) {
  return run(cmd, args, { cwd, env: ENV, timeout, maxBuffer: 64 * 1024 * 1024 });
}

const CONSUMER = `
import { ExecServerClient, protocol } from 'exec-server/client';
import * as sdk from 'exec-server';
import { loadConfig, buildApp } from 'exec-server/server';
const [url, token] = process.argv.slice(2);
const client = await ExecServerClient.connect(url, { token, session: { sandbox: { type: 'workspace-write' } } });
const proc = await client.exec(['sh', '-c', 'echo out; echo err >&2; id -u']);
const r = await proc.wait();
const info = await client.sessionInfo();
await client.deleteSession();
console.log(JSON.stringify({
  stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode, sandboxType: info.sandboxType,
  sameClient: sdk.ExecServerClient === ExecServerClient, schema: typeof protocol.SessionInfoSchema,
  server: [typeof loadConfig, typeof buildApp],
}));
`;

const TYPED = `
import { ExecServerClient, type Notification, type SessionInfo } from 'exec-server/client';
import type { Config } from 'exec-server/server';
export async function f(url: string): Promise<SessionInfo> {
  const c = await ExecServerClient.connect(url);
  c.connection.onNotification((n: Notification) => {
    if (n.method === 'process/exited') console.log(n.params.exitCode.toFixed(0));
  });
  return c.sessionInfo();
}
export const listen = (c: Config): string => c.listen;
`;

test('npm pack, npm install into an empty project, and the SDK from plain Node', { timeout: 900_000 }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'exec-server-pack-'));
  t.after(() => rm(dir, { recursive: true, force: true }));

  await sh('npm', ['pack', '--pack-destination', dir], ROOT);
  const tarball = (await readdir(dir)).find((f) => f.endsWith('.tgz'));
  assert.ok(tarball, 'npm pack wrote a tarball');
  const listing = (await sh('tar', ['tzf', join(dir, tarball)], dir)).stdout.split('\n');
  for (const f of [
    'dist/client/index.js',
    'dist/client/index.d.ts',
    'dist/client/browser.js',
    'dist/server.js',
    'dist/server.d.ts',
    'dist/main.js',
    'native/sandbox-join.c',
    'scripts/build-native.sh',
    'build/console/index.html',
  ])
    assert.ok(listing.includes(`package/${f}`), `the package holds ${f}`);
  assert.ok(
    !listing.some((f) => f.startsWith('package/src/') || f.startsWith('package/test/')),
    'no sources, no tests',
  );

  const project = join(dir, 'project');
  await sh('mkdir', ['-p', project], dir);
  await writeFile(
    join(project, 'package.json'),
    JSON.stringify({ name: 'consumer', private: true, type: 'module', allowScripts: { 'exec-server': true } }),
  );
  await sh('npm', ['install', '--no-audit', '--no-fund', join(dir, tarball)], project, 600_000);
  const pkg = join(project, 'node_modules', 'exec-server');
  for (const helper of ['pty-relay', 'sandbox-join'])
    assert.ok(existsSync(join(pkg, 'build', helper)), `postinstall built build/${helper} from its source`);

  await t.test('the installed command serves, and exec-server/client runs a command on it', async () => {
    const workspaces = join(dir, 'workspaces');
    const server = await startServerProcess(
      join(project, 'node_modules', '.bin', 'exec-server'),
      ['--workspace-root', workspaces, '--token', 'pack-token'],
      { cwd: project },
    );
    t.after(() => server.stop());
    await writeFile(join(project, 'use.mjs'), CONSUMER);
    const { stdout } = await sh(process.execPath, ['use.mjs', server.url, 'pack-token'], project, 120_000);
    const r = JSON.parse(stdout) as Record<string, unknown>;
    const [out, uid] = String(r['stdout']).trim().split('\n');
    assert.equal(out, 'out');
    assert.match(uid ?? '', /^\d+$/);
    assert.equal(r['stderr'], 'err\n', server.stderr().slice(-2000));
    assert.equal(r['exitCode'], 0);
    assert.equal(r['sandboxType'], existsSync('/usr/bin/bwrap') ? 'bubblewrap' : 'none');
    assert.equal(r['sameClient'], true, "'exec-server' and 'exec-server/client' are one module");
    assert.equal(r['schema'], 'object');
    assert.deepEqual(r['server'], ['function', 'function']);
  });

  await t.test('the declarations type-check in the user project', async () => {
    await writeFile(join(project, 'typed.ts'), TYPED);
    await writeFile(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          strict: true,
          noEmit: true,
          types: ['node'],
          typeRoots: [join(ROOT, 'node_modules', '@types')],
        },
        files: ['typed.ts'],
      }),
    );
    const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const r = await sh(process.execPath, [tsc, '-p', project], project).catch(
      (e: { stdout?: string; stderr?: string }) => e,
    );
    assert.equal(`${r.stdout ?? ''}${r.stderr ?? ''}`, '', 'no type errors');
  });

  await t.test('the browser entry bundles for the browser without Node built-ins', async () => {
    const esbuild = await import('esbuild');
    const result = await esbuild.build({
      stdin: {
        contents: `import { HttpApi, ExecServerHttpError, protocol } from 'exec-server/client';
          export const api = new HttpApi('http://127.0.0.1:1', 't');
          export const names = [ExecServerHttpError.name, Object.keys(protocol.RPC_NOTIFICATIONS)];`,
        resolveDir: project,
        loader: 'js',
      },
      absWorkingDir: project,
      bundle: true,
      platform: 'browser',
      format: 'esm',
      write: false,
      metafile: true,
      logLevel: 'silent',
    });
    const inputs = Object.keys(result.metafile.inputs);
    assert.ok(
      inputs.some((i) => i.endsWith('exec-server/dist/client/browser.js')),
      'the browser condition picks browser.js',
    );
    assert.deepEqual(
      inputs.filter((i) => /node_modules\/ws\/|^node:|dist\/client\/(client|rpc-connection|files)\.js/.test(i)),
      [],
      'no ws, no node: module, no Node-only part of the SDK',
    );
    const code = result.outputFiles[0]?.text ?? '';
    assert.doesNotMatch(code, /\brequire\(|from ["']node:/, 'no Node import left in the bundle');
  });
});
