/**
 * The checkpoints of hibernated containers (docs/docker-backend.md, "Hibernation"): their names,
 * listing and deleting them through the engine, and the facts a hibernated container keeps for
 * a restarted server, read through the archive API (no exec, no wake). The schedule and the
 * checkpoint/restore of a live session are in hibernation.ts.
 */
import type Docker from 'dockerode';
import { extract } from 'tar-stream';
import { statusOf, withDeadline } from '../engine/engine-client.ts';
import { execError } from '../../../errors.ts';

/**
 * Prefix of the checkpoint a hibernated container has. Each hibernation takes a name of its own
 * (`PREFIX-<time>`): containerd keeps an uploaded checkpoint under a reference made from the
 * checkpoint's directory, and a restore of a second checkpoint under the same name can be
 * refused ("failed to upload checkpoint to containerd: ... already exists").
 */
export const CHECKPOINT_PREFIX = 'exec-server-hibernation';

/** Whether a checkpoint name is one this server gave (a hibernation's). */
export const isOurs = (name: string | undefined): name is string =>
  name === CHECKPOINT_PREFIX || (name?.startsWith(`${CHECKPOINT_PREFIX}-`) ?? false);

/**
 * Kept in the container's root filesystem while it is hibernated (the control tmpfs, with the
 * session record, is only inside the checkpoint): what a restarted server needs to re-adopt
 * the session without waking it: the shell path, the exec path (`agent N`: N processes kept by
 * the agent), then the session record.
 * Root-only; removed again on wake, so snapshots never hold it.
 */
export const HIBERNATION_FILE = '/var/lib/exec-server-hibernation/session';

/** The checkpoint calls dockerode has but its type definitions lack. */
export interface CheckpointApi {
  createCheckpoint(opts: { CheckpointID: string; Exit: boolean; abortSignal: AbortSignal }): Promise<unknown>;
  listCheckpoint(opts: { abortSignal: AbortSignal }): Promise<Array<{ Name?: string }> | null>;
  deleteCheckpoint(name: string, opts: { abortSignal: AbortSignal }): Promise<unknown>;
}

/** The names of our checkpoints a container holds, through the engine. */
export function listCheckpoints(container: Docker.Container, timeoutMs: number): Promise<string[]> {
  return withDeadline('checkpoint list', timeoutMs, async (abortSignal) =>
    ((await (container as unknown as CheckpointApi).listCheckpoint({ abortSignal })) ?? [])
      .map((c) => c.Name)
      .filter(isOurs),
  );
}

/** Deletes every checkpoint of ours the container holds. */
export async function deleteCheckpoints(container: Docker.Container, timeoutMs: number): Promise<void> {
  for (const name of await listCheckpoints(container, timeoutMs)) {
    try {
      await withDeadline('checkpoint delete', timeoutMs, (abortSignal) =>
        (container as unknown as CheckpointApi).deleteCheckpoint(name, { abortSignal }),
      );
    } catch (err) {
      if (statusOf((err as { cause?: unknown }).cause) !== 404) throw err;
    }
  }
}

/** What a hibernated container of an earlier server run carries (see `HIBERNATION_FILE`). */
export interface HibernatedFacts {
  readonly shellPath: string;
  readonly execPath: 'agent' | 'exec';
  /** Processes the agent kept when the session hibernated. */
  readonly agentProcesses: number;
  readonly record: string | undefined;
  /** The checkpoint to wake from (the newest of ours). */
  readonly checkpoint: string;
}

/**
 * The facts of a stopped container that holds this server's checkpoint, or undefined when it
 * holds none (a container that died). Reads through the archive API: no exec, no wake.
 */
export async function readHibernatedFacts(
  container: Docker.Container,
  timeoutMs: number,
): Promise<HibernatedFacts | undefined> {
  // Names end in a base-36 time of the same length for centuries: the newest sorts last.
  const checkpoint = (await listCheckpoints(container, timeoutMs)).sort().at(-1);
  if (checkpoint === undefined) return undefined;
  const tar = await withDeadline('hibernation facts', timeoutMs, async (abortSignal) => {
    const stream = (await container.getArchive({ path: HIBERNATION_FILE, abortSignal } as {
      path: string;
    })) as NodeJS.ReadableStream;
    const parts: Buffer[] = [];
    let size = 0;
    for await (const chunk of stream) {
      size += (chunk as Buffer).length;
      if (size > 1024 * 1024) throw execError('EXEC_ERR_BACKEND', 'hibernation facts larger than 1 MiB');
      parts.push(chunk as Buffer);
    }
    return Buffer.concat(parts);
  });
  const text = (await firstTarEntry(tar)).toString('utf8');
  const [shell = '', path = '', ...rest] = text.split('\n');
  const [execPath, processes = '0'] = path.split(' ');
  const record = rest.join('\n');
  return {
    shellPath: shell || '/bin/sh',
    execPath: execPath === 'agent' ? 'agent' : 'exec',
    agentProcesses: /^\d{1,6}$/.test(processes) ? Number(processes) : 0,
    record: record === '' ? undefined : record,
    checkpoint,
  };
}

/** The content of the first file of a tar archive (the engine's archive of one file). */
async function firstTarEntry(tar: Buffer): Promise<Buffer> {
  const reader = extract();
  let first: Buffer | undefined;
  const done = new Promise<Buffer>((resolve, reject) => {
    reader.on('entry', (_header, stream, next) => {
      const parts: Buffer[] = [];
      stream.on('data', (chunk: unknown) => {
        parts.push(chunk as Buffer);
      });
      stream.on('end', () => {
        first ??= Buffer.concat(parts);
        next();
      });
    });
    reader.on('finish', () =>
      first === undefined ? reject(execError('EXEC_ERR_BACKEND', 'hibernation facts: empty archive')) : resolve(first),
    );
    reader.on('error', (err: Error) =>
      reject(execError('EXEC_ERR_BACKEND', `hibernation facts: bad archive (${err.message})`, { cause: err })),
    );
  });
  reader.end(tar);
  return done;
}
