/** Shared helpers of the filesystem tests: a server plus session per backend, and root-side fixtures. */
import { execFile } from 'node:child_process';
import { chmod, mkdtemp, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { TestContext } from 'node:test';
import { RpcError } from '../../src/client/rpc-connection.ts';
import { dockerTestOptions } from '../docker/engine.ts';
import { backendSelected } from '../support/backends.ts';
import { startServer, TestSession, type BackendKind, type TestServer } from '../support/harness.ts';

const run = promisify(execFile);

export interface BackendCase {
  readonly kind: BackendKind;
  readonly options: { skip?: string; timeout: number };
}

/**
 * Every test runs on both backends; docker is skipped (outside CI) when no engine answers. In
 * `npm test` each group runs its share (test/support/backends.ts, `backendSelected`).
 */
export const BACKENDS: readonly BackendCase[] = (
  [
    { kind: 'local', options: { timeout: 120_000 } },
    { kind: 'docker', options: { ...dockerTestOptions, timeout: dockerTestOptions.skip ? 1000 : 300_000 } },
  ] as const
).filter((c) => backendSelected(c.kind));

export interface FsEnv {
  readonly server: TestServer;
  readonly session: TestSession;
  readonly kind: BackendKind;
  /** The session workspace (inside the container on docker). */
  readonly workdir: string;
  /** A directory outside every writable root (when the sandbox excludes /tmp). */
  readonly outside: string;
  readonly containerId: string | undefined;
  /** Runs a shell script as root where the session's files live (host or container): fixtures. */
  sh(script: string): Promise<string>;
}

export interface FsEnvOptions {
  readonly flags?: readonly string[];
  /** Session spec; `workdir` is chosen here for the local backend. */
  readonly session?: (paths: { workdir: string; outside: string }) => Record<string, unknown>;
  /** Bearer token for the WebSocket (when the flags configure one). */
  readonly token?: string;
}

/** A server and one session on `kind`, closed after the test. */
export async function fsEnv(t: TestContext, kind: BackendKind, opts: FsEnvOptions = {}): Promise<FsEnv> {
  const server = await startServer({ backend: kind, flags: opts.flags ?? [] });
  t.after(() => server.close());
  let workdir: string;
  let outside: string;
  if (kind === 'local') {
    workdir = await realpath(await mkdtemp(join(tmpdir(), 'fs-ws-')));
    // Not under /tmp: a sandboxed session sees a /tmp of its own, in its commands and its fs/* calls.
    outside = await realpath(await mkdtemp('/var/tmp/fs-outside-'));
    const dirs = [workdir, outside];
    // Like a user's directories (mkdtemp makes them 0700): readable by the sandbox's own user.
    await Promise.all(dirs.map((d) => chmod(d, 0o755)));
    t.after(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));
  } else {
    workdir = '/workspace';
    outside = '/opt/outside';
  }
  const spec = { workdir, ...(opts.session?.({ workdir, outside }) ?? {}) };
  const session = await TestSession.open(server.url, { session: spec }, opts.token ? { token: opts.token } : {});
  t.after(() => session.close());
  const info = await session.request('session/info', {});
  const containerId = info['containerId'] as string | undefined;
  const sh = async (script: string): Promise<string> => {
    const argv =
      kind === 'local' ? ['sh', '-c', script] : ['docker', 'exec', '-u', '0', containerId ?? '', 'sh', '-c', script];
    const { stdout } = await run(argv[0] as string, argv.slice(1), { maxBuffer: 16 * 1024 * 1024 });
    return stdout;
  };
  if (kind === 'docker') await sh(`mkdir -p ${outside}`);
  return { server, session, kind, workdir: info['workdir'] as string, outside, containerId, sh };
}

/** Asserts that `promise` fails with JSON-RPC code `rpcCode` (and our code, when given). */
export async function rejectsRpc(
  promise: Promise<unknown>,
  rpcCode: number,
  code?: string,
  message?: RegExp,
): Promise<RpcError> {
  try {
    await promise;
  } catch (err) {
    if (!(err instanceof RpcError)) throw err;
    if (
      err.rpcCode !== rpcCode ||
      (code !== undefined && err.code !== code) ||
      (message !== undefined && !message.test(err.message))
    ) {
      throw new Error(
        `expected ${rpcCode} ${code ?? ''} ${message ?? ''}, got ${err.rpcCode} ${err.code}: ${err.message}`,
      );
    }
    return err;
  }
  throw new Error(`expected an error ${rpcCode} ${code ?? ''}, got success`);
}

export const b64 = (s: string | Buffer): string => Buffer.from(s).toString('base64');
export const fromB64 = (s: unknown): string => Buffer.from(String(s), 'base64').toString('utf8');
export const fileUri = (p: string): string => new URL(`file://${p}`).href;
