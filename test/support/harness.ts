/**
 * Test harness: a real server (buildApp + listen on a free port) per test or suite, on the
 * local or the docker backend, and a session helper over a real WebSocket.
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.ts';
import type { Backend } from '../../src/backends/types.ts';
import { createLocalBackend } from '../../src/backends/local/local-backend.ts';
import { loadConfig, runtimeList, warmPoolTemplates, type Config } from '../../src/config.ts';
import { silentLogger } from '../../src/logger.ts';
import { RpcConnection, type RpcConnectionOptions } from '../../src/client/rpc-connection.ts';

/**
 * A notification as the tests look at it: the wire's fields by name, whatever the method (the
 * SDK's own type is the protocol's discriminated union).
 */
export interface Notification {
  readonly method: string;
  readonly params: Readonly<Record<string, unknown>>;
}

export type BackendKind = 'local' | 'docker';

export interface TestServer {
  readonly app: FastifyInstance;
  readonly url: string;
  readonly httpUrl: string;
  readonly config: Config;
  readonly backend: Backend;
  close(): Promise<void>;
}

export interface ServerOptions {
  readonly backend?: BackendKind;
  /** Extra flags, e.g. ['--token', 'x']. */
  readonly flags?: readonly string[];
  /** Local backend: force sandbox type none (as if bwrap were missing). */
  readonly noBubblewrap?: boolean;
  /** Local backend: one bwrap per command instead of kept-warm sandboxes. */
  readonly coldSandbox?: boolean;
  /** Docker backend: the instance id (a restarted server with the same id re-adopts its sessions). */
  readonly instanceId?: string;
}

/** The docker path the suites run on: the agent unless EXEC_SERVER_DOCKER_EXEC_PATH=exec. */
export function dockerExecPath(): 'agent' | 'exec' {
  return process.env['EXEC_SERVER_DOCKER_EXEC_PATH'] === 'exec' ? 'exec' : 'agent';
}

/**
 * The server "crashes" for a restart test: on the docker backend it stops acting for its
 * instance and gives the instance lease up, leaving every container running (as a SIGKILL
 * would), so that a second server with the same instance id can adopt them.
 */
export async function abandon(server: TestServer): Promise<void> {
  const backend = server.backend as Backend & { handOver?: () => Promise<void> };
  await backend.handOver?.();
}

export async function startServer(opts: ServerOptions = {}): Promise<TestServer> {
  const workspaceRoot = await mkdtemp(join(tmpdir(), 'exec-server-test-'));
  const kind = opts.backend ?? 'local';
  const config = loadConfig(
    [
      '--listen',
      'ws://127.0.0.1:0',
      '--workspace-root',
      workspaceRoot,
      '--backend',
      kind,
      '--terminate-grace-ms',
      '500',
      ...(opts.flags ?? []),
    ],
    {},
  );
  let backend: Backend;
  if (kind === 'docker') {
    const { createDockerBackend, agentWindowFor } = await import('../../src/backends/docker/index.ts');
    const { TEST_IMAGE } = await import('../docker/engine.ts');
    backend = createDockerBackend(
      {
        defaultImage: TEST_IMAGE,
        instanceId: opts.instanceId ?? `test-${process.pid}-${Math.random().toString(16).slice(2, 8)}`,
        // `--docker-exec-path exec` on a test's flags wins over the suite's environment.
        execPath: config.dockerExecPath === 'exec' ? 'exec' : dockerExecPath(),
        agentWindowBytes: agentWindowFor(config.wsBufferLimitBytes),
        // The server's default: agents reached by their sockets where the engine shares the directory.
        agentSocketDir: config.dockerAgentSocketDir === 'off' ? undefined : config.dockerAgentSocketDir,
        runtime: config.runtime ?? process.env.EXEC_SERVER_TEST_RUNTIME,
        allowedRuntimes: config.allowedRuntimes === undefined ? undefined : runtimeList(config.allowedRuntimes),
        checkpointDir: config.checkpointDir,
        checkpointMaxMb: config.checkpointMaxMb,
        warmPoolTemplates:
          config.warmPoolTemplates === undefined ? undefined : warmPoolTemplates(config.warmPoolTemplates),
      },
      silentLogger,
    );
  } else {
    backend = await createLocalBackend(
      {
        workspaceRoot,
        warmSandboxes: !opts.coldSandbox,
        ...(opts.noBubblewrap
          ? { bubblewrap: { available: false, path: 'bwrap', reason: 'disabled by the test' } }
          : {}),
      },
      silentLogger,
    );
  }
  const app = await buildApp({ config, backend });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    app,
    url: `ws://127.0.0.1:${port}`,
    httpUrl: `http://127.0.0.1:${port}`,
    config,
    backend,
    close: () => closeServer(app),
  };
}

/** How long a teardown may take before it is forced and its test fails (instead of hanging the run). */
const TEARDOWN_MS = 30_000;

/** Rejects when `promise` is still pending after `ms`. */
export async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

async function closeServer(app: FastifyInstance): Promise<void> {
  try {
    await within(app.close(), TEARDOWN_MS, 'server close');
  } catch (err) {
    // Force what is left so the file can still end, and fail the test that hung.
    for (const client of app.websocketServer?.clients ?? []) client.terminate();
    app.server.closeAllConnections();
    throw err;
  }
}

export interface ProcessResult {
  readonly stdout: string;
  readonly stderr: string;
  readonly pty: string;
  readonly exited: Record<string, unknown>;
  readonly events: Notification[];
}

/** A connection plus an initialized session, recording every notification. */
export class TestSession {
  readonly conn: RpcConnection;
  readonly sessionId: string;
  readonly initResult: Record<string, unknown>;
  readonly notifications: Notification[] = [];
  #waiters: Array<() => void> = [];

  private constructor(conn: RpcConnection, init: Record<string, unknown>) {
    this.conn = conn;
    this.initResult = init;
    this.sessionId = init['sessionId'] as string;
  }

  static async open(
    url: string,
    init: Record<string, unknown> = {},
    opts: RpcConnectionOptions = {},
  ): Promise<TestSession> {
    const conn = await RpcConnection.open(url, opts);
    const buffered: Notification[] = [];
    const off = conn.onNotification((n) => buffered.push(n));
    const result = await conn.request<Record<string, unknown>>('initialize', {
      clientName: 'exec-server-tests',
      ...init,
    });
    conn.notify('initialized', {});
    const session = new TestSession(conn, result);
    off();
    session.notifications.push(...buffered);
    conn.onNotification((n) => {
      session.notifications.push(n);
      const waiters = session.#waiters;
      session.#waiters = [];
      for (const w of waiters) w();
    });
    return session;
  }

  request<T = Record<string, unknown>>(method: string, params?: unknown): Promise<T> {
    return this.conn.request<T>(method, params);
  }

  /** Resolves when `predicate` holds over the notifications received so far. */
  async waitFor(predicate: (all: Notification[]) => boolean, timeoutMs = 20_000, what = 'notification'): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!predicate(this.notifications)) {
      const left = deadline - Date.now();
      if (left <= 0)
        throw new Error(`timed out waiting for ${what}; got ${JSON.stringify(this.notifications.slice(-5))}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 200));
        this.#waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  eventsOf(processId: string): Notification[] {
    return this.notifications.filter((n) => n.params['processId'] === processId);
  }

  /** Waits for `process/closed` and returns the decoded output and the exit notification. */
  async result(processId: string, timeoutMs = 20_000): Promise<ProcessResult> {
    await this.waitFor(
      (all) => all.some((n) => n.method === 'process/closed' && n.params['processId'] === processId),
      timeoutMs,
      `process/closed of ${processId}`,
    );
    const events = this.eventsOf(processId);
    const text = (stream: string): string =>
      Buffer.concat(
        events
          .filter((e) => e.method === 'process/output' && e.params['stream'] === stream)
          .map((e) => Buffer.from(e.params['chunk'] as string, 'base64')),
      ).toString('utf8');
    const exited = events.find((e) => e.method === 'process/exited');
    if (!exited) throw new Error(`closed without exited for ${processId}`);
    return { stdout: text('stdout'), stderr: text('stderr'), pty: text('pty'), exited: exited.params, events };
  }

  start(processId: string, argv: string[], extra: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
    return this.request('process/start', { processId, argv, tty: false, ...extra });
  }

  /** Starts, waits for the end, returns the result. */
  async run(processId: string, argv: string[], extra: Record<string, unknown> = {}): Promise<ProcessResult> {
    await this.start(processId, argv, extra);
    return this.result(processId);
  }

  close(): Promise<void> {
    return this.conn.close();
  }
}

export const b64 = (s: string | Buffer): string => Buffer.from(s).toString('base64');
export const unb64 = (s: unknown): string => Buffer.from(String(s), 'base64').toString('utf8');
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Waits until `cond()` holds, polling every 20 ms; throws naming `what` after `ms`. */
export async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(20);
  }
}

/** `startServer` for one test: closed when the test ends. */
export async function serverFor(t: TestContext, opts: ServerOptions = {}): Promise<TestServer> {
  const server = await startServer(opts);
  t.after(() => server.close());
  return server;
}

/** `TestSession.open` for one test: closed when the test ends. */
export async function sessionFor(
  t: TestContext,
  url: string,
  init: Record<string, unknown> = {},
  opts: RpcConnectionOptions = {},
): Promise<TestSession> {
  const s = await TestSession.open(url, init, opts);
  t.after(() => s.close());
  return s;
}

/**
 * Reads a process's output with `process/read` from `afterSeq` until it has exited and is closed
 * (long polls of a second each, for at most `timeoutMs`): its text, the seqs read, its exit code
 * and signal.
 */
export async function readToEnd(
  s: TestSession,
  processId: string,
  afterSeq = 0,
  timeoutMs = 60_000,
): Promise<{ text: string; seqs: number[]; exitCode: unknown; signal: unknown }> {
  let text = '';
  const seqs: number[] = [];
  let after = afterSeq;
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const r = await s.request<{
      chunks: Array<{ seq: number; chunk: string }>;
      nextSeq: number;
      exited: boolean;
      exitCode: unknown;
      signal: unknown;
      closed: boolean;
    }>('process/read', { processId, afterSeq: after, waitMs: 1000 });
    for (const c of r.chunks) {
      seqs.push(c.seq);
      text += Buffer.from(c.chunk, 'base64').toString('utf8');
    }
    after = Math.max(after, r.nextSeq - 1);
    if (r.exited && r.closed) return { text, seqs, exitCode: r.exitCode, signal: r.signal };
  }
  throw new Error(`process ${processId} did not end within ${timeoutMs} ms`);
}

/**
 * Starts `burst`, 32 MiB of `z` then `end`, and reads it in fits and starts, far slower than it
 * is written (the socket paused and resumed); `closed()` says whether the connection closed.
 */
export async function stopAndGoBurst(s: TestSession): Promise<{ closed: () => boolean }> {
  let closed = false;
  s.conn.onClose(() => (closed = true));
  await s.start('burst', ['sh', '-c', 'head -c 33554432 /dev/zero | tr "\\0" z; echo end']);
  for (let i = 0; i < 6; i++) {
    s.conn.socket.pause();
    await sleep(150);
    s.conn.socket.resume();
    await sleep(50);
  }
  return { closed: () => closed };
}
