/**
 * The lease that makes one server the holder of an instance id on an engine. Recovery adopts
 * every container labelled with the instance id and removes the ones it cannot adopt, so two
 * live servers with one id would take each other's sessions apart. The lease is held in the
 * engine itself, not in this process's memory or a file on one host:
 *
 * - a container named after the instance (engine names are unique: creating it is an atomic
 *   acquire; a second server gets 409 Conflict);
 * - whose only process reads its standard input, attached by the holder with `StdinOnce`: when
 *   the holder's connection to the engine ends for any reason (exit, SIGKILL, a lost host),
 *   the engine closes that input, the process ends and `AutoRemove` deletes the container. The
 *   lease cannot outlive its holder, and no clock or heartbeat decides it.
 *
 * A server that finds the lease held waits (a rolling restart: the predecessor is stopping), then
 * fails with `EXEC_ERR_INSTANCE_IN_USE`. See docs/docker-backend.md, "One server per instance id".
 *
 * Replica leases (`--fleet`, docs/architecture.md "Fleet"): each replica of a fleet holds its own
 * lease, named after the instance AND its replica id, with its advertised URL in the labels; the
 * other replicas read them (replica-registry.ts) to know who is alive and where. A lone server and
 * a fleet never share an instance id: each kind waits for (then fails on) a live lease of the other.
 */
import { createHash } from 'node:crypto';
import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import { ExecServerError, execError } from '../../../errors.ts';
import { statusOf, withDeadline } from './engine-client.ts';
import type { DockerLogger } from '../options.ts';

/** Label on the lease container: the instance id it holds (not `exec-server.instance`, which recovery adopts). */
export const LEASE_LABEL = 'exec-server.lease';

/** Label on a replica lease: the replica's id. */
export const REPLICA_LABEL = 'exec-server.replica';
/** Label on a replica lease: the URL the other replicas forward to. */
export const ADVERTISE_LABEL = 'exec-server.advertise-url';

/**
 * Engine name of the lease container of `instanceId` (ids may hold characters names may not), or
 * of one replica's lease in a fleet (replica ids are name-safe, see config/fleet.ts).
 */
export function leaseName(instanceId: string, replicaId?: string): string {
  const base = `exec-server-lease-${createHash('sha256').update(instanceId).digest('hex').slice(0, 16)}`;
  return replicaId === undefined ? base : `${base}-r-${replicaId}`;
}

/** Which lease to hold (the instance's, or one replica's) and how long to wait for a held one. */
export interface InstanceLeaseOptions {
  readonly instanceId: string;
  /** How long to wait for a held lease before failing. */
  readonly waitMs: number;
  /** Deadline of each engine call. */
  readonly timeoutMs: number;
  /** A replica of a fleet: its own lease (undefined: the one lease of a lone server). */
  readonly replica?: { readonly replicaId: string; readonly advertiseUrl: string } | undefined;
  /**
   * A volume the lease container mounts, so that the engine refuses to remove it while this
   * server lives: its build's exec agent (agent-volume.ts sweeps the volumes nothing mounts).
   */
  readonly pinVolume?: (() => Promise<PinnedVolume | undefined>) | undefined;
}

/** A named volume to mount, made with these labels if the mount is what creates it. */
export interface PinnedVolume {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
}

/** Where the lease container mounts its pinned volume (nothing reads it there). */
const PIN_TARGET = '/exec-server-pinned';

/** The mounts of a lease container: the pinned volume, never filled from the image (`NoCopy`). */
function pinMounts(pin: PinnedVolume | undefined): Docker.MountSettings[] {
  if (pin === undefined) return [];
  // The engine's default driver, as the volume's own maker uses (the typings insist on naming one).
  const volume = { NoCopy: true, Labels: { ...pin.labels } } as Docker.MountSettings['VolumeOptions'];
  return [{ Type: 'volume', Source: pin.name, Target: PIN_TARGET, ReadOnly: true, VolumeOptions: volume }];
}

type LeaseState =
  | { readonly kind: 'none' }
  | { readonly kind: 'held'; readonly containerId: string; readonly stream: Duplex }
  | { readonly kind: 'lost'; readonly reason: string }
  | { readonly kind: 'released' };

const RETRY_MS = 500;
/** How often a lost lease is tried again. */
const RETAKE_MS = 1000;

/** The engine's HTTP status behind an error of `withDeadline` (the registry error keeps it as its cause). */
function engineStatus(err: unknown): number | undefined {
  return err instanceof ExecServerError ? statusOf(err.cause) : statusOf(err);
}

/** The lease container that says which server acts for an instance id on an engine, alive with its connection. */
export class InstanceLease {
  readonly #docker: Docker;
  readonly #options: InstanceLeaseOptions;
  readonly #log: DockerLogger;
  #state: LeaseState = { kind: 'none' };
  /** Set by `acquireForRecovery`: this server acts for the instance, so it must hold the lease. */
  #wanted = false;
  #acquiring: Promise<void> | undefined;

  constructor(docker: Docker, options: InstanceLeaseOptions, log: DockerLogger) {
    this.#docker = docker;
    this.#options = options;
    this.#log = log;
  }

  /** Whether this server holds the instance now. */
  get held(): boolean {
    return this.#state.kind === 'held';
  }

  /** Why the lease is not held after it was (for readiness), if so. */
  get lostReason(): string | undefined {
    return this.#state.kind === 'lost' ? this.#state.reason : undefined;
  }

  /**
   * Takes the lease before recovery acts on the instance's containers: with the default image
   * when the engine has it, else with the image of one of those containers. When neither exists
   * there is nothing to adopt; the lease is then taken with the first container this server
   * makes (`ensure`), before anything else can find it.
   */
  async acquireForRecovery(defaultImage: string, containers: readonly { readonly ImageID?: string }[]): Promise<void> {
    this.#wanted = true;
    const image = (await this.#imagePresent(defaultImage)) ? defaultImage : containers.find((c) => c.ImageID)?.ImageID;
    if (image === undefined) return;
    await this.ensure(image);
  }

  /** Takes the lease with `image` if this server wants it and does not hold it yet (one attempt at a time). */
  async ensure(image: string): Promise<void> {
    if (!this.#wanted || this.#state.kind !== 'none') return;
    this.#acquiring ??= this.acquire(image).finally(() => {
      this.#acquiring = undefined;
    });
    await this.#acquiring;
  }

  /**
   * Takes the lease, with `image` (any local image with `/bin/sh`) for its container; waits up to
   * `waitMs` while another live server holds it. Idempotent while held.
   */
  async acquire(image: string): Promise<void> {
    if (this.#state.kind === 'held') return;
    const deadline = Date.now() + this.#options.waitMs;
    let warned = false;
    for (;;) {
      let blocker = await this.#otherKind();
      if (blocker === undefined) {
        if (await this.#tryCreate(image)) {
          blocker = await this.#otherKind();
          if (blocker === undefined) return;
          // A server of the other kind took its lease at the same moment: both step back (with
          // a random pause) and try again; one of them then finds the other's lease.
          await this.#drop();
        } else {
          const holder = await this.#holder();
          if (holder !== undefined && !holder.running) {
            // Its holder is gone and the engine has not removed it yet: clear it and try again
            // (after a pause: the engine may be removing it already).
            await this.#remove(holder.id);
            await new Promise((resolve) => setTimeout(resolve, RETRY_MS / 5));
            continue;
          }
          blocker = { since: holder?.since, fleet: this.#options.replica !== undefined };
        }
      }
      if (Date.now() >= deadline) throw this.#inUse(blocker);
      if (!warned) {
        warned = true;
        this.#log.warn(
          { instanceId: this.#options.instanceId, lease: this.#name, since: blocker.since },
          `another server holds instance id ${this.#options.instanceId} on this engine; waiting up to ${Math.round(this.#options.waitMs / 1000)} s for it to stop`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, RETRY_MS + Math.floor(Math.random() * RETRY_MS)));
    }
  }

  /** This server's lease container name. */
  get #name(): string {
    return leaseName(this.#options.instanceId, this.#options.replica?.replicaId);
  }

  /**
   * A live lease of the other kind on this instance id: for a lone server, any replica's; for a
   * replica, the lone server's. Either would adopt or remove what the other holds.
   */
  async #otherKind(): Promise<{ since: string | undefined; fleet: boolean } | undefined> {
    const { instanceId, timeoutMs, replica } = this.#options;
    const leases = await withDeadline('lease list', timeoutMs, (abortSignal) =>
      this.#docker.listContainers({
        filters: { label: [`${LEASE_LABEL}=${instanceId}`], status: ['running'] },
        abortSignal,
      }),
    );
    const lone = `/${leaseName(instanceId)}`;
    const found = leases.find((c) =>
      replica === undefined ? c.Labels?.[REPLICA_LABEL] !== undefined : (c.Names ?? []).includes(lone),
    );
    if (found === undefined) return undefined;
    return { since: new Date(found.Created * 1000).toISOString(), fleet: replica === undefined };
  }

  async #drop(): Promise<void> {
    const state = this.#state;
    this.#state = { kind: 'none' };
    if (state.kind !== 'held') return;
    state.stream.destroy();
    await this.#remove(state.containerId);
  }

  /** Gives the lease up (the engine removes its container once the input closes). */
  async release(): Promise<void> {
    const state = this.#state;
    this.#state = { kind: 'released' };
    if (state.kind !== 'held') return;
    state.stream.destroy();
    await this.#remove(state.containerId);
  }

  /** Creates, attaches and starts the lease container; false when another one has the name. */
  async #tryCreate(image: string): Promise<boolean> {
    const { instanceId, timeoutMs, replica } = this.#options;
    let container: Docker.Container;
    try {
      const pin = await this.#options.pinVolume?.();
      container = await withDeadline('lease create', timeoutMs, (abortSignal) =>
        this.#docker.createContainer({
          name: this.#name,
          Image: image,
          Entrypoint: ['/bin/sh', '-c', 'while read -r _; do :; done'],
          Cmd: [],
          Labels: {
            [LEASE_LABEL]: instanceId,
            ...(replica === undefined
              ? {}
              : { [REPLICA_LABEL]: replica.replicaId, [ADVERTISE_LABEL]: replica.advertiseUrl }),
          },
          OpenStdin: true,
          StdinOnce: true,
          AttachStdin: true,
          NetworkDisabled: true,
          HostConfig: {
            AutoRemove: true,
            NetworkMode: 'none',
            Memory: 16 * 1024 * 1024,
            PidsLimit: 8,
            Mounts: pinMounts(pin),
          },
          abortSignal,
        } as Docker.ContainerCreateOptions),
      );
    } catch (err) {
      if (engineStatus(err) === 409) return false;
      throw err;
    }
    try {
      const stream = (await withDeadline('lease attach', timeoutMs, () =>
        container.attach({ stream: true, stdin: true, stdout: true, stderr: true, hijack: true }),
      )) as Duplex;
      stream.on('error', () => undefined);
      stream.resume();
      await withDeadline('lease start', timeoutMs, () => container.start());
      this.#state = { kind: 'held', containerId: container.id, stream };
      stream.once('close', () => this.#onClosed(container.id, image));
      this.#log.info({ instanceId, lease: this.#name }, 'holding the instance lease');
      return true;
    } catch (err) {
      await this.#remove(container.id);
      throw err;
    }
  }

  #onClosed(containerId: string, image: string): void {
    if (this.#state.kind !== 'held' || this.#state.containerId !== containerId) return;
    const reason = `lost the lease of instance id ${this.#options.instanceId} (the engine connection that held it ended)`;
    this.#state = { kind: 'lost', reason };
    this.#log.error({ instanceId: this.#options.instanceId }, `${reason}: taking it again when the engine answers`);
    void this.#retake(image);
  }

  /**
   * After a lost connection (an engine restart, a network cut) the lease is taken again as soon as
   * the engine answers: the old lease container ended with the connection. If another server took
   * the id meanwhile, this one stays not ready (its readiness says why) and keeps trying.
   */
  async #retake(image: string): Promise<void> {
    const lost = this.lostReason ?? 'lost the lease';
    while (this.#state.kind === 'lost') {
      await new Promise((resolve) => setTimeout(resolve, RETAKE_MS).unref());
      if (this.#state.kind !== 'lost') return;
      try {
        if (await this.#tryCreate(image)) return;
        const holder = await this.#holder();
        if (holder !== undefined && !holder.running) await this.#remove(holder.id);
        else if (holder !== undefined) this.#state = { kind: 'lost', reason: `${lost}; another server holds it now` };
      } catch {
        // The engine does not answer yet: try again.
      }
    }
  }

  async #imagePresent(image: string): Promise<boolean> {
    try {
      await withDeadline('image inspect', this.#options.timeoutMs, () => this.#docker.getImage(image).inspect());
      return true;
    } catch {
      return false;
    }
  }

  async #holder(): Promise<{ id: string; running: boolean; since: string | undefined } | undefined> {
    try {
      const info = await withDeadline('lease inspect', this.#options.timeoutMs, (abortSignal) =>
        this.#docker.getContainer(this.#name).inspect({ abortSignal }),
      );
      return { id: info.Id, running: info.State.Running, since: info.State.StartedAt };
    } catch (err) {
      if (engineStatus(err) === 404) return undefined;
      throw err;
    }
  }

  async #remove(containerId: string): Promise<void> {
    await withDeadline('lease remove', this.#options.timeoutMs, (abortSignal) =>
      this.#docker.getContainer(containerId).remove({ force: true, abortSignal }),
    ).catch((err: unknown) => {
      const status = engineStatus(err);
      // Gone already, or being removed by the engine (AutoRemove): either way not ours any more.
      if (status !== 404 && status !== 409) this.#log.warn({ err: (err as Error).message }, 'lease remove failed');
    });
  }

  #inUse(blocker: { since: string | undefined; fleet: boolean }): ExecServerError<'EXEC_ERR_INSTANCE_IN_USE'> {
    const { instanceId, waitMs, replica } = this.#options;
    const since = blocker.since === undefined ? '' : ` (since ${blocker.since})`;
    const who =
      replica !== undefined && !blocker.fleet
        ? 'a lone exec-server (without --fleet)'
        : replica === undefined && blocker.fleet
          ? 'a fleet of exec-server replicas (--fleet)'
          : replica === undefined
            ? 'another exec-server'
            : `another replica with --replica-id ${replica.replicaId}`;
    return execError(
      'EXEC_ERR_INSTANCE_IN_USE',
      `${who} holds instance id ${instanceId} on this engine${since} and did not stop within ${Math.round(waitMs / 1000)} s: stop it, or give this server its own --instance-id (its lease is the container ${this.#name})`,
      { detail: { instanceId, lease: this.#name } },
    );
  }
}
