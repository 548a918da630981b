/**
 * The disk limit of docker sessions. Where the engine can limit a container's writable layer
 * (`HostConfig.StorageOpt.size`: overlay2 on xfs mounted with project quotas, devicemapper,
 * btrfs, zfs) it does, and writes past the limit fail with ENOSPC. Elsewhere (overlay2 on ext4,
 * the common case) the engine refuses the option at create: that answer is cached for the
 * backend and the session's limit falls to the server's disk watch (src/sessions/disk-watch.ts),
 * which measures the writable layer through `inspect?size=true`.
 */
import type Docker from 'dockerode';
import type { BackendDisk } from '../../types.ts';
import { withDeadline } from '../engine/engine-client.ts';
import { HibernatableSession } from '../checkpoints/hibernation.ts';
import type { HibernationInit } from '../checkpoints/hibernation-types.ts';

/** The engine walks the whole layer to answer a size inspect: slower than other calls on a big workspace. */
const SIZE_TIMEOUT_MS = 30_000;

/** How the engine answers a create whose `StorageOpt size` its storage driver cannot apply. */
const UNSUPPORTED = /storage-?opt|quota|backing filesystem|not supported.*size|size.*not supported/i;

/** Whether `err` (a refused container create) says the engine cannot limit a writable layer. */
export function isStorageOptUnsupported(err: unknown): boolean {
  return UNSUPPORTED.test((err as Error | undefined)?.message ?? '');
}

/**
 * What one backend knows about `StorageOpt size`: unknown until the first create that asks;
 * once the engine refused it, no later create asks again (each refusal costs a round trip).
 */
export class StorageOptSupport {
  #unsupportedReason: string | undefined;

  /** Whether creates should ask the engine for a limit. */
  get wanted(): boolean {
    return this.#unsupportedReason === undefined;
  }

  /** Why the engine cannot enforce disk limits, once it said so. */
  get unsupportedReason(): string | undefined {
    return this.#unsupportedReason;
  }

  /** Records the engine's refusal; true the first time (the caller logs it once). */
  refused(reason: string): boolean {
    const first = this.#unsupportedReason === undefined;
    this.#unsupportedReason ??= reason;
    return first;
  }
}

/** How the disk limit of a container that exists is enforced, read from its inspect answer. */
export function enforcementOf(info: Pick<Docker.ContainerInspectInfo, 'HostConfig'>): BackendDisk['enforcement'] {
  return info.HostConfig.StorageOpt?.['size'] !== undefined ? 'engine' : 'watch';
}

/**
 * Bytes in the container's writable layer (`SizeRw`), which holds the workspace too: session
 * containers mount no volumes (container-config.ts). The engine walks the layer to answer, so
 * the call gets a longer deadline than others (still bounded: a wedged engine fails it).
 */
export async function containerDiskUse(container: Docker.Container, timeoutMs: number): Promise<number> {
  const info = (await withDeadline('container inspect (size)', Math.max(timeoutMs, SIZE_TIMEOUT_MS), (abortSignal) =>
    container.inspect({ size: true, abortSignal } as Docker.ContainerInspectOptions),
  )) as { SizeRw?: unknown };
  return typeof info.SizeRw === 'number' && Number.isFinite(info.SizeRw) && info.SizeRw >= 0 ? info.SizeRw : 0;
}

/** A docker session (behind its hibernation gate) that also reports its disk. */
export class DiskAwareSession extends HibernatableSession {
  readonly disk: BackendDisk;

  constructor(init: HibernationInit, enforcement: BackendDisk['enforcement'], timeoutMs: number) {
    super(init);
    const container = init.inner.container;
    // Inspect answers for a stopped (hibernated) container too, without waking it.
    this.disk = { enforcement, usage: () => containerDiskUse(container, timeoutMs) };
  }
}
