/**
 * A second Docker engine for tests of a pool of engines: its own data root, exec root, socket,
 * pid file and bridge (never `--bridge none`, which deletes the first engine's `docker0`), with
 * `--live-restore` so that its containers outlive a stop of the engine, and the test image
 * copied in from the first engine. Needs root, as the first engine does.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdir, open } from 'node:fs/promises';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);

const NAME = 'exec-server-engine2';
export const SECOND_ENGINE_SOCKET = `/run/${NAME}.sock`;
export const SECOND_ENGINE_HOST = `unix://${SECOND_ENGINE_SOCKET}`;
const BRIDGE = 'exs-engine2';
const BRIDGE_ADDRESS = '172.31.252.1/24';

async function answers(): Promise<boolean> {
  return execFileP('docker', ['-H', SECOND_ENGINE_HOST, 'info', '--format', '{{.ID}}'], { timeout: 5000 }).then(
    () => true,
    () => false,
  );
}

/** `docker` against the second engine. */
export async function docker2(...args: string[]): Promise<string> {
  const { stdout } = await execFileP('docker', ['-H', SECOND_ENGINE_HOST, ...args], { maxBuffer: 64 * 1024 * 1024 });
  return stdout;
}

async function ensureBridge(): Promise<void> {
  const present = await execFileP('ip', ['link', 'show', BRIDGE]).then(
    () => true,
    () => false,
  );
  if (present) return;
  await execFileP('ip', ['link', 'add', BRIDGE, 'type', 'bridge']);
  await execFileP('ip', ['addr', 'add', BRIDGE_ADDRESS, 'dev', BRIDGE]);
  await execFileP('ip', ['link', 'set', BRIDGE, 'up']);
}

export interface SecondEngine {
  /** Stops the engine (its containers stay, `--live-restore`). */
  stop(): Promise<void>;
  /** Starts it again after `stop`. */
  start(): Promise<void>;
}

/** Starts the second engine (or finds it running) with `image` loaded. */
export async function startSecondEngine(image: string): Promise<SecondEngine> {
  await ensureBridge();
  const storage = (await execFileP('docker', ['info', '--format', '{{.Driver}}'])).stdout.trim() || 'overlay2';
  let child: ChildProcess | undefined;
  const start = async (): Promise<void> => {
    if (await answers()) return;
    await mkdir(`/var/lib/${NAME}`, { recursive: true });
    const log = await open(`/tmp/${NAME}.log`, 'a');
    child = spawn(
      'dockerd',
      [
        `--data-root=/var/lib/${NAME}`,
        `--exec-root=/run/${NAME}`,
        `--pidfile=/run/${NAME}.pid`,
        `--host=${SECOND_ENGINE_HOST}`,
        `--bridge=${BRIDGE}`,
        `--storage-driver=${storage}`,
        '--iptables=false',
        '--ip-masq=false',
        '--live-restore',
      ],
      { stdio: ['ignore', log.fd, log.fd], detached: true },
    );
    child.unref();
    await log.close();
    for (let i = 0; i < 120; i++) {
      if (await answers()) return;
      if (child.exitCode !== null) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    throw new Error(`the second engine did not answer (see /tmp/${NAME}.log)`);
  };
  const stop = async (): Promise<void> => {
    const pid = Number((await execFileP('cat', [`/run/${NAME}.pid`]).catch(() => ({ stdout: '' }))).stdout.trim());
    if (!pid) return;
    process.kill(pid, 'SIGTERM');
    for (let i = 0; i < 120; i++) {
      try {
        process.kill(pid, 0);
      } catch {
        return;
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error('the second engine did not stop');
  };
  await start();
  const present = await docker2('images', '-q', image);
  if (present.trim() === '') {
    // No registry: the image goes over as a tar from the first engine.
    await execFileP('sh', ['-c', `docker save ${image} | docker -H ${SECOND_ENGINE_HOST} load`]);
  }
  return { stop, start };
}
