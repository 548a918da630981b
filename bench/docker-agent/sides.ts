/**
 * The two sides of bench/docker-agent.ts, one command at a time: a raw dockerode exec (what a
 * program using dockerode directly does) and ours, a session of the server through the SDK.
 */
import type { Duplex } from 'node:stream';
import Docker from 'dockerode';
import { ExecServerClient } from '../../src/client/index.ts';

const docker = new Docker();

// --- raw dockerode --------------------------------------------------------------------------

/** A container of `image` that idles until stopped, without network, one CPU. */
export async function rawContainer(image: string): Promise<Docker.Container> {
  const c = await docker.createContainer({
    Image: image,
    Cmd: ['/bin/sh', '-c', 'trap "exit 0" TERM; while :; do sleep 3600 & wait $!; done'],
    HostConfig: { NetworkMode: 'none', Init: true, NanoCpus: 1e9 },
  });
  await c.start();
  return c;
}

/** One raw exec to the end: create, hijacked start, drain, inspect. Returns bytes read. */
export async function rawExec(c: Docker.Container, cmd: string[], tty = false): Promise<number> {
  const exec = await c.exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true, Tty: tty });
  const socket = (await exec.start({ hijack: true, stdin: false, Tty: tty })) as unknown as Duplex;
  let bytes = 0;
  socket.on('data', (d: Buffer) => (bytes += d.length));
  await new Promise((r) => socket.once('close', r));
  for (let delay = 1; ; delay = Math.min(delay * 2, 50)) {
    const info = await exec.inspect();
    if (!info.Running) break;
    await new Promise((r) => setTimeout(r, delay));
  }
  return bytes;
}

/**
 * CPU seconds a container's processes used so far (the engine's one-shot stats: cgroup v1 and
 * v2 alike). For ours that is the command and the exec agent; for the raw side, the command.
 */
export async function containerCpuSeconds(c: Docker.Container): Promise<number> {
  const stats = (await c.stats({ stream: false, 'one-shot': true } as never)) as unknown as {
    cpu_stats?: { cpu_usage?: { total_usage?: number } };
  };
  return (stats.cpu_stats?.cpu_usage?.total_usage ?? 0) / 1e9;
}

/** The container of a session of ours. */
export async function sessionContainer(client: ExecServerClient): Promise<Docker.Container> {
  const id = (await client.sessionInfo()).containerId;
  if (id === undefined) throw new Error('the session has no container (is the server on the docker backend?)');
  return docker.getContainer(id);
}

/** Removes a raw container, running or not. */
export async function remove(c: Docker.Container): Promise<void> {
  await c.remove({ force: true }).catch(() => undefined);
}

// --- ours -----------------------------------------------------------------------------------

export type Sandbox = 'danger-full-access' | 'workspace-write';

/** A session of ours with `sandbox`, through the SDK. */
export async function ourSession(url: string, sandbox: Sandbox): Promise<ExecServerClient> {
  return ExecServerClient.connect(url, {
    session: { sandbox: { type: sandbox } as never, approvalPolicy: 'never' },
    clientName: 'bench',
  });
}

/** One command of ours to the end; returns the output bytes received. */
export async function ourRun(client: ExecServerClient, argv: string[], tty = false): Promise<number> {
  let bytes = 0;
  const h = await client.exec(argv, { tty, collect: false });
  h.onOutput((c) => (bytes += c.data.length));
  await h.wait({ check: false });
  return bytes;
}
