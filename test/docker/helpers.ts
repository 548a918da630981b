/** Shared helpers of the docker tests: a backend per test file, specs, a recording sink. */
import { randomUUID } from 'node:crypto';
import { after, before, type TestContext } from 'node:test';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { createDockerBackend, type DockerBackend, type DockerBackendOptions } from '../../src/backends/docker/index.ts';
import { silentLogger } from '../../src/logger.ts';
import type {
  BackendExit,
  BackendSession,
  BackendSessionSpec,
  ProcessSink,
  ResolvedSandbox,
  SpawnMode,
  SpawnRequest,
  StreamName,
} from '../../src/backends/types.ts';
import { asSessionId, asTenantId } from '../../src/ids.ts';
import { engineReady, TEST_IMAGE } from './engine.ts';

export const execFileP = promisify(execFile);

export function makeBackend(extra: Partial<DockerBackendOptions> = {}): DockerBackend {
  return createDockerBackend(
    // EXEC_SERVER_TEST_RUNTIME: the same suites under another runtime (test/docker-runsc/).
    {
      defaultImage: TEST_IMAGE,
      instanceId: `test-${randomUUID().slice(0, 8)}`,
      defaultResources: { memoryMb: 512, cpus: 1, pids: 256 },
      runtime: process.env.EXEC_SERVER_TEST_RUNTIME,
      ...extra,
    },
    process.env.DEBUG_DOCKER
      ? { info: console.error, warn: console.error, error: console.error, debug: console.error }
      : silentLogger,
  );
}

export function sessionSpec(extra: Partial<BackendSessionSpec> = {}): BackendSessionSpec {
  return {
    id: asSessionId(randomUUID()),
    tenant: asTenantId('alice'),
    labels: {},
    resources: { memoryMb: 512, cpus: 1, pids: 256 },
    network: false,
    ...extra,
  };
}

export const UNRESTRICTED: ResolvedSandbox = { kind: 'unrestricted' };

export function spawnRequest(argv: string[], extra: Partial<SpawnRequest> & { mode?: SpawnMode } = {}): SpawnRequest {
  return {
    argv,
    cwd: '/workspace',
    env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', HOME: '/root' },
    mode: 'pipe-no-stdin',
    size: { cols: 80, rows: 24 },
    sandbox: UNRESTRICTED,
    ...extra,
  };
}

/** A sink that records everything and checks the contract (no output after exit, one exit). */
export class RecordingSink implements ProcessSink {
  readonly chunks: Array<{ stream: StreamName; data: Buffer }> = [];
  exitResult: BackendExit | undefined;
  violations: string[] = [];
  readonly exited: Promise<BackendExit>;
  #resolve!: (e: BackendExit) => void;
  /** When false, output is counted but not kept (memory tests). */
  keep = true;
  bytes = 0;

  constructor() {
    this.exited = new Promise((r) => {
      this.#resolve = r;
    });
  }

  output(stream: StreamName, data: Buffer): void {
    if (this.exitResult !== undefined) this.violations.push('output after exit');
    this.bytes += data.length;
    // The sink contract: copy what is kept (the backend reuses its read buffer).
    if (this.keep) this.chunks.push({ stream, data: Buffer.from(data) });
  }

  exit(result: BackendExit): void {
    if (this.exitResult !== undefined) this.violations.push('second exit');
    this.exitResult = result;
    this.#resolve(result);
  }

  text(stream?: StreamName): string {
    return Buffer.concat(
      this.chunks.filter((c) => stream === undefined || c.stream === stream).map((c) => c.data),
    ).toString('utf8');
  }
}

export async function docker(...args: string[]): Promise<string> {
  const { stdout } = await execFileP('docker', args, { maxBuffer: 64 * 1024 * 1024 });
  return stdout;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Removes every container the servers of `instanceId` left on the engine: sessions and pools,
 * a fleet's claims, and quota slots (container/quota-slots.ts, which carry a label of their own).
 */
export async function removeInstanceContainers(instanceId: string): Promise<void> {
  for (const label of [
    `exec-server.instance=${instanceId}`,
    `exec-server.claim-instance=${instanceId}`,
    `exec-server.quota-instance=${instanceId}`,
  ]) {
    const ids = (await docker('ps', '-aq', '--filter', `label=${label}`)).split('\n').filter(Boolean);
    if (ids.length > 0) await docker('rm', '-f', ...ids).catch(() => undefined);
  }
}

/** Runs the shell script `script` in `session` to its end, `env` added to the usual environment: its sink. */
export async function runScript(
  session: BackendSession,
  script: string,
  env: Record<string, string> = {},
): Promise<RecordingSink> {
  const sink = new RecordingSink();
  const base = spawnRequest(['sh', '-c', script]);
  await session.spawn({ ...base, env: { ...base.env, ...env } }, sink);
  await sink.exited;
  return sink;
}

/** Ids of the running warm-pool containers of `backend` (by its instance label). */
export async function poolContainerIds(backend: DockerBackend): Promise<string[]> {
  const out = await docker(
    'ps',
    '-q',
    '--no-trunc',
    '--filter',
    `label=exec-server.instance=${backend.options.instanceId}`,
    '--filter',
    'label=exec-server.pool=true',
  );
  return out
    .trim()
    .split('\n')
    .filter((id) => id !== '');
}

/** A backend of its own for the test `t` (closed when it ends) and a new session on it. */
export async function testSession(t: TestContext, extra: Partial<DockerBackendOptions> = {}): Promise<BackendSession> {
  const backend = makeBackend(extra);
  t.after(() => backend.close());
  return backend.createSession(sessionSpec());
}

/**
 * One backend and one session shared by the tests of a file: created before them, closed after
 * (nothing happens when no engine answers; the tests themselves are then skipped or failed).
 */
export function sharedSession(extra: Partial<DockerBackendOptions> = {}): { readonly session: BackendSession } {
  let backend: DockerBackend | undefined;
  let session: BackendSession | undefined;
  before(async () => {
    if (!engineReady) return;
    backend = makeBackend(extra);
    session = await backend.createSession(sessionSpec());
  });
  after(async () => {
    await backend?.close();
  });
  return {
    get session(): BackendSession {
      if (!session) throw new Error('no docker session (engine unavailable)');
      return session;
    },
  };
}
