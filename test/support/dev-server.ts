/**
 * `exec-server serve` from this checkout (src/main.ts through tsx) as a process of its own, on a
 * free loopback port: for the tests and benchmarks that SIGKILL a server, start its successor
 * with the same instance id, or need a server outside the test's process.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { freePort } from './free-port.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface DevServerOptions {
  /** The session image (`--image`). */
  readonly image: string;
  /** `--instance-id`: a successor with the same one adopts the sessions. */
  readonly instanceId: string;
  /** More flags, after the common ones. */
  readonly flags?: readonly string[];
  /** `--log-level`: `warn` unless a test reads the server's `info` lines. */
  readonly logLevel?: 'warn' | 'info' | 'debug';
  readonly env?: NodeJS.ProcessEnv;
  /** The server's stdout: dropped unless `inherit`. */
  readonly stdout?: 'ignore' | 'inherit';
  /** The server's stderr: shown as the test's (`inherit`, the default) or kept for `stderr()`. */
  readonly stderr?: 'inherit' | 'capture';
}

export interface DevServer {
  /** `ws://127.0.0.1:PORT` */
  readonly url: string;
  /** `http://127.0.0.1:PORT` */
  readonly http: string;
  readonly child: ChildProcess;
  /** What the server wrote on stderr so far, its last 256 KiB (`stderr: 'capture'`). */
  stderr(): string;
  /** Resolves once `/readyz` answers 200; rejects when the server exits first or takes too long. */
  ready(timeoutMs?: number): Promise<void>;
  /** SIGTERM, and waits for the exit. */
  stop(): Promise<void>;
  /** SIGKILL, and waits for the exit. */
  kill(): Promise<void>;
}

/** Starts the server without waiting for it (a successor waits for its lease): see `ready()`. */
export async function spawnDevServer(o: DevServerOptions): Promise<DevServer> {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [
      ...['--import', 'tsx', 'src/main.ts', 'serve', '--backend', 'docker', '--image', o.image],
      ...['--instance-id', o.instanceId, '--listen', `ws://127.0.0.1:${port}`, '--log-level', o.logLevel ?? 'warn'],
      ...(o.flags ?? []),
    ],
    {
      cwd: ROOT,
      env: o.env ?? process.env,
      stdio: ['ignore', o.stdout ?? 'ignore', o.stderr === 'capture' ? 'pipe' : 'inherit'],
    },
  );
  let err = '';
  child.stderr?.setEncoding('utf8').on('data', (s: string) => {
    err = (err + s).slice(-256 * 1024);
  });
  const http = `http://127.0.0.1:${port}`;
  const end = async (signal: NodeJS.Signals): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const gone = once(child, 'exit');
    child.kill(signal);
    await gone;
  };
  return {
    url: `ws://127.0.0.1:${port}`,
    http,
    child,
    stderr: () => err,
    stop: () => end('SIGTERM'),
    kill: () => end('SIGKILL'),
    // Generous: on a loaded CI machine a server's boot (tsx, recovery of its containers) is slow.
    async ready(timeoutMs = 120_000) {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        if (child.exitCode !== null || child.signalCode !== null)
          throw new Error(`the server exited (${child.exitCode ?? child.signalCode}) before it was ready: ${err}`);
        const ok = await fetch(`${http}/readyz`).then(
          (r) => r.ok,
          () => false,
        );
        if (ok) return;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error(`the server was not ready within ${timeoutMs} ms: ${err}`);
    },
  };
}

/** Starts the server and waits until it is ready; a server that does not get there is killed. */
export async function startDevServer(o: DevServerOptions): Promise<DevServer> {
  const server = await spawnDevServer(o);
  try {
    await server.ready();
  } catch (err) {
    await server.kill();
    throw err;
  }
  return server;
}
