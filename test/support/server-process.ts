/**
 * An `exec-server` started as its own process from a given bin (a checkout copied elsewhere,
 * or an installed package), on a free loopback port: its `ws://` line read from stdout.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';

export interface ServerProcess {
  readonly url: string;
  readonly child: ChildProcess;
  /** What the server wrote on stderr so far (for failure messages). */
  stderr(): string;
  stop(): Promise<void>;
}

export async function startServerProcess(
  bin: string,
  args: readonly string[],
  opts: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number },
): Promise<ServerProcess> {
  const child = spawn(process.execPath, [bin, '--listen', 'ws://127.0.0.1:0', ...args], {
    cwd: opts.cwd,
    env: opts.env ?? process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (s: string) => {
    if (err.length < 64 * 1024) err += s;
  });
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await once(child, 'exit');
    clearTimeout(timer);
  };
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(
      () => reject(new Error(`no ws:// line within the time; stderr: ${err}`)),
      opts.timeoutMs ?? 60_000,
    );
    child.stdout!.setEncoding('utf8').on('data', (s: string) => {
      out += s;
      const line = /^(ws:\/\/\S+)$/m.exec(out)?.[1];
      if (line) {
        clearTimeout(timer);
        resolve(line);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the server exited (${code}) before listening; stderr: ${err}`));
    });
  }).catch(async (e: unknown) => {
    await stop();
    throw e;
  });
  return { url, child, stderr: () => err, stop };
}
