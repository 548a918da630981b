/**
 * Memory checkpoints kept past the container they were taken in: the memory half of a live
 * template (a snapshot made with `memory: true`) and of a fork. docs/architecture.md, "Memory
 * checkpoints", says why the store is a directory of the server's own:
 *
 * The engine restores a container only from a checkpoint in its own directory for that container
 * (`<engine root>/containers/<id>/checkpoints/<name>`; a `checkpoint-dir` on start is refused by
 * the engines of today: "custom checkpointdir is not supported"), and it deletes that directory
 * with the container. So a checkpoint is moved out of the source's directory into the store
 * (root-only, never mounted into a container), and copied into each new container's directory
 * before its start. Files are hard-linked where the store and the engine share a filesystem
 * (runsc only reads them), and copied where not.
 */
import { randomBytes } from 'node:crypto';
import { copyFile, link, lstat, mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import type { MemoryCheckpointTotals } from '../../types.ts';
import { withDeadline } from '../engine/engine-client.ts';
import type { AckMarks } from '../agent/agent-channel.ts';
import { CHECKPOINT_PREFIX } from './checkpoints.ts';

/** The file scripts/runsc-runtime.sh adds to each checkpoint so no two are alike (rewritten per copy). */
const MARKER = 'exec-server-checkpoint';
/** `CheckpointMeta` of the checkpoint, kept beside it; never copied into a container. */
const META_FILE = 'exec-server-meta.json';

/** What a restore needs to know of the source besides its checkpoint. */
export interface CheckpointMeta {
  /** Acknowledgement marks the source's agent never read (agent-channel.ts `unsentMarks`). */
  readonly marks?: AckMarks | undefined;
  /** Whether the source had a network: a container restored from it must have the same mounts. */
  readonly network?: boolean | undefined;
}

/** What a failed memory snapshot's clean-up left behind: its image, or its checkpoint here. */
export type Leftover = keyof NonNullable<MemoryCheckpointTotals['cleanupFailures']>;

/**
 * The server's directory of memory checkpoints (`--checkpoint-dir`): moved in after a checkpoint,
 * copied out for a restore.
 */
export class CheckpointStore {
  readonly #dir: string;
  readonly #docker: Docker;
  readonly #timeoutMs: number;
  #engineRoot: Promise<string> | undefined;
  /** Snapshot id → bytes, of the checkpoints this server holds (filled lazily from the directory). */
  readonly #sizes = new Map<string, number>();
  #loaded: Promise<void> | undefined;
  readonly #cleanupFailures: Partial<Record<Leftover, number>> = {};

  constructor(dir: string, docker: Docker, timeoutMs: number) {
    this.#dir = dir;
    this.#docker = docker;
    this.#timeoutMs = timeoutMs;
  }

  get totals(): MemoryCheckpointTotals {
    let bytes = 0;
    for (const b of this.#sizes.values()) bytes += b;
    const failures = Object.keys(this.#cleanupFailures).length > 0 ? { ...this.#cleanupFailures } : undefined;
    return { count: this.#sizes.size, bytes, ...(failures === undefined ? {} : { cleanupFailures: failures }) };
  }

  /**
   * Counts a failed memory snapshot whose `what` could not be removed (memory-snapshot.ts): kept
   * with the store's totals, as /metrics reads them.
   */
  cleanupFailed(what: Leftover): void {
    this.#cleanupFailures[what] = (this.#cleanupFailures[what] ?? 0) + 1;
  }

  /** The engine's data directory, which this server must see at the same path (the same host). */
  async #root(): Promise<string> {
    this.#engineRoot ??= withDeadline('engine info', this.#timeoutMs, async () => {
      const info = (await this.#docker.info()) as { DockerRootDir?: string };
      const root = info.DockerRootDir ?? '/var/lib/docker';
      try {
        await stat(join(root, 'containers'));
      } catch (err) {
        throw execError(
          'EXEC_ERR_UNSUPPORTED',
          `memory checkpoints need the engine's data directory (${root}) on this server's host: ${(err as Error).message}`,
        );
      }
      return root;
    }).catch((err: unknown) => {
      this.#engineRoot = undefined;
      throw err;
    });
    return this.#engineRoot;
  }

  /** Checks that checkpoints can move between containers here (before anything is stopped). */
  async check(): Promise<void> {
    await this.#root();
  }

  #entry(snapshotId: string): string {
    // A snapshot id is an image id: the entry's name is its hex, never a path of the client's.
    const hex = /^(?:sha256:)?([0-9a-f]{12,64})$/.exec(snapshotId)?.[1];
    if (hex === undefined) throw execError('EXEC_ERR_NOT_FOUND', `snapshot ${snapshotId} not found`);
    return join(this.#dir, hex);
  }

  async #containerDir(containerId: string, name: string): Promise<string> {
    return join(await this.#root(), 'containers', containerId, 'checkpoints', name);
  }

  async #load(): Promise<void> {
    this.#loaded ??= (async () => {
      await mkdir(this.#dir, { recursive: true, mode: 0o700 });
      for (const name of await readdir(this.#dir)) {
        if (/^[0-9a-f]{64}$/.test(name)) this.#sizes.set(`sha256:${name}`, await dirBytes(join(this.#dir, name)));
      }
    })();
    return this.#loaded;
  }

  /**
   * Whether the store holds `snapshotId`'s checkpoint. Asked of the directory, not only of what
   * this process loaded or kept: replicas of a fleet that share `--checkpoint-dir` see the
   * checkpoints the others keep (complete once their meta file, written last, is there) and
   * remove.
   */
  async has(snapshotId: string): Promise<boolean> {
    await this.#load();
    if (!/^(sha256:)?[0-9a-f]{64}$/.test(snapshotId)) return false;
    const entry = this.#entry(snapshotId);
    if (this.#sizes.has(snapshotId)) {
      if (await exists(entry)) return true;
      this.#sizes.delete(snapshotId);
      return false;
    }
    if (!(await exists(join(entry, META_FILE)))) return false;
    this.#sizes.set(snapshotId.startsWith('sha256:') ? snapshotId : `sha256:${snapshotId}`, await dirBytes(entry));
    return true;
  }

  /**
   * Moves the checkpoint `name` of `containerId` into the store under `snapshotId`, with what
   * `meta` says of the source; returns its bytes.
   */
  async keep(containerId: string, name: string, snapshotId: string, meta: CheckpointMeta = {}): Promise<number> {
    await this.#load();
    const from = await this.#containerDir(containerId, name);
    const to = this.#entry(snapshotId);
    await rm(to, { recursive: true, force: true });
    await copyTree(from, to);
    await writeFile(join(to, META_FILE), JSON.stringify(meta), { mode: 0o600 });
    const bytes = await dirBytes(to);
    this.#sizes.set(snapshotId, bytes);
    return bytes;
  }

  /** Puts the stored checkpoint of `snapshotId` into `containerId`'s directory; returns its name there. */
  async install(snapshotId: string, containerId: string): Promise<string> {
    // One of ours (checkpoints.ts): deleted after the restore like a hibernation's.
    const name = `${CHECKPOINT_PREFIX}-${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
    const to = await this.#containerDir(containerId, name);
    await copyTree(this.#entry(snapshotId), to);
    // Every restore uploads the checkpoint to containerd, where two uploads of the same bytes at
    // once collide: each copy is made unlike the others (runsc's restore ignores this file).
    await rm(join(to, MARKER), { force: true });
    await writeFile(join(to, MARKER), `${Date.now()} ${containerId} ${randomBytes(8).toString('hex')}\n`, {
      mode: 0o600,
    });
    return name;
  }

  /** What was kept of the source with the checkpoint of `snapshotId` (none: empty). */
  async meta(snapshotId: string): Promise<CheckpointMeta> {
    const text = await readFile(join(this.#entry(snapshotId), META_FILE), 'utf8').catch(() => undefined);
    return text === undefined ? {} : (JSON.parse(text) as CheckpointMeta);
  }

  /** Removes the checkpoint of `snapshotId` (none is fine). */
  async remove(snapshotId: string): Promise<void> {
    await this.#load();
    await rm(this.#entry(snapshotId), { recursive: true, force: true });
    this.#sizes.delete(snapshotId);
  }
}

async function exists(path: string): Promise<boolean> {
  return lstat(path).then(
    () => true,
    () => false,
  );
}

/** Copies a flat checkpoint directory, hard-linking each file where it can. */
async function copyTree(from: string, to: string): Promise<void> {
  await mkdir(to, { recursive: true, mode: 0o700 });
  for (const name of await readdir(from)) {
    const src = join(from, name);
    const s = await lstat(src);
    if (s.isDirectory()) {
      await copyTree(src, join(to, name));
      continue;
    }
    if (!s.isFile() || name === META_FILE) continue;
    if (name === MARKER) {
      await copyFile(src, join(to, name));
      continue;
    }
    await link(src, join(to, name)).catch(() => copyFile(src, join(to, name)));
  }
}

async function dirBytes(dir: string): Promise<number> {
  let total = 0;
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const s = await lstat(join(dir, name));
    total += s.isDirectory() ? await dirBytes(join(dir, name)) : s.size;
  }
  return total;
}
