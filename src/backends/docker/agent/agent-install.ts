/**
 * Puts the exec agent into a session container through the engine's archive API, so it works
 * with a remote engine or a sidecar (no bind mount of a server path). Done on a created
 * container before it starts, and again when a recovered container's agent is missing.
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type Docker from 'dockerode';
import { pack } from 'tar-stream';
import { withDeadline } from '../engine/engine-client.ts';
import { AGENT_DIR, AGENT_PATH } from './agent-connection.ts';

/** `scripts/build-native.sh` builds it statically (npm install / npm ci). */
export const AGENT_BINARY = fileURLToPath(new URL('../../../../build/exec-agent', import.meta.url));

const cached = new Map<string, Promise<Buffer | undefined>>();

/** The agent binary at `path` (read once), or undefined when it is not built. */
export function agentBinary(path = AGENT_BINARY): Promise<Buffer | undefined> {
  let binary = cached.get(path);
  if (!binary) {
    binary = readFile(path).catch(() => undefined);
    cached.set(path, binary);
  }
  return binary;
}

/** A tar holding the agent's directory and binary, root-owned and closed to everyone else. */
export async function agentArchive(binary: Buffer): Promise<Buffer> {
  const tar = pack();
  const chunks: Buffer[] = [];
  tar.on('data', (c: unknown) => {
    if (Buffer.isBuffer(c)) chunks.push(c);
  });
  const done = new Promise<void>((resolve, reject) => {
    tar.on('end', resolve);
    tar.on('error', reject);
  });
  const mtime = new Date(0);
  tar.entry({ name: AGENT_DIR.slice(1), type: 'directory', mode: 0o700, uid: 0, gid: 0, mtime });
  tar.entry({ name: AGENT_PATH.slice(1), mode: 0o700, uid: 0, gid: 0, mtime }, binary);
  tar.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** Copies the agent into `container` (created or running). */
export async function installAgent(container: Docker.Container, binary: Buffer, timeoutMs: number): Promise<void> {
  const archive = await agentArchive(binary);
  await withDeadline('agent install', timeoutMs, (abortSignal) =>
    container.putArchive(archive, { path: '/', abortSignal }),
  );
}

/** Whether the container already has an agent binary. */
export async function agentPresent(container: Docker.Container, timeoutMs: number): Promise<boolean> {
  try {
    const res = (await withDeadline('agent stat', timeoutMs, (abortSignal) =>
      container.infoArchive({ path: AGENT_PATH, abortSignal }),
    )) as { resume?: () => void };
    // The answer is a stream (a HEAD, so empty): left unread, it held its engine connection
    // (and kept the process alive) until the engine dropped it minutes later.
    res.resume?.();
    return true;
  } catch {
    return false;
  }
}
