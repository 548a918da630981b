/**
 * Markers of snapshots under way across a fleet, in the engine (decisions in
 * snapshot-marker-plan.ts): a created, never started container on the pool's first engine,
 * labelled with the fleet's instance id, the tenant and when it was made.
 */
import { randomBytes } from 'node:crypto';
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import { statusOf, withDeadline } from '../engine/engine-client.ts';
import { LABEL } from '../container/labels.ts';
import { MARKER_LABEL, markerCreatedMs, markerPrefix, type SeenMarker } from './snapshot-marker-plan.ts';

/** What the snapshot quota asks of the markers (a fake one in unit tests). */
export interface MarkerStore {
  /** Makes a marker of `tenant`; resolves with its container id. */
  create(tenant: string): Promise<string>;
  /** The tenant's markers of every replica. */
  list(tenant: string): Promise<SeenMarker[]>;
  /** Removes a marker by container id; one already gone is no error. */
  remove(id: string): Promise<void>;
}

/** Where a fleet's snapshot markers live: the instance and the pool's first engine. */
export interface SnapshotMarkersOptions {
  readonly instanceId: string;
  /** The engine holding the markers (the pool's first). */
  readonly engine: Docker;
  /** Image of the markers (never run); another image of the engine when it lacks this one. */
  readonly image: string;
  readonly timeoutMs: number;
}

const causeStatus = (err: unknown): number | undefined => statusOf((err as { cause?: unknown }).cause);

/** The markers of snapshots under way in a fleet: created, listed and removed in the engine. */
export class SnapshotMarkers implements MarkerStore {
  readonly #o: SnapshotMarkersOptions;

  constructor(options: SnapshotMarkersOptions) {
    this.#o = options;
  }

  async create(tenant: string): Promise<string> {
    const o = this.#o;
    const name = `${markerPrefix(o.instanceId, tenant)}${randomBytes(6).toString('hex')}`;
    const labels = {
      [MARKER_LABEL.instance]: o.instanceId,
      [MARKER_LABEL.tenant]: tenant,
      [MARKER_LABEL.created]: String(Date.now()),
    };
    const create = (image: string) =>
      withDeadline('snapshot marker create', o.timeoutMs, (abortSignal) =>
        o.engine.createContainer({ name, Image: image, Labels: labels, Cmd: ['true'], abortSignal }),
      );
    const made = await create(o.image).catch(async (err: unknown) => {
      if (causeStatus(err) !== 404) throw err;
      return create(await this.#anyImage());
    });
    return made.id;
  }

  /**
   * An image to make a marker of when the engine lacks the default one: not a snapshot if there
   * is another, as a container made of a snapshot would hold off its deletion while it lasts.
   */
  async #anyImage(): Promise<string> {
    const images = await withDeadline('image list', this.#o.timeoutMs, () => this.#o.engine.listImages());
    const image = images.find((i) => i.Labels?.[LABEL.snapshot] !== 'true') ?? images[0];
    if (image === undefined)
      throw execError('EXEC_ERR_BACKEND', 'snapshot marker: the engine has no image to make a marker of');
    return image.Id;
  }

  async list(tenant: string): Promise<SeenMarker[]> {
    const label = [`${MARKER_LABEL.instance}=${this.#o.instanceId}`, `${MARKER_LABEL.tenant}=${tenant}`];
    const found = await withDeadline('snapshot marker list', this.#o.timeoutMs, (abortSignal) =>
      this.#o.engine.listContainers({ all: true, filters: { label }, abortSignal }),
    );
    return found.map((c) => ({ id: c.Id, createdMs: markerCreatedMs(c.Labels, c.Created) }));
  }

  async remove(id: string): Promise<void> {
    await withDeadline('snapshot marker remove', this.#o.timeoutMs, () =>
      this.#o.engine.getContainer(id).remove({ force: true }),
    ).catch((err: unknown) => {
      if (causeStatus(err) !== 404) throw err;
    });
  }
}

/**
 * The markers of a fleet on the first engine of `backend()` (asked for at first use: the pool's
 * first backend is made after its quota). Lone servers have none.
 */
export function snapshotMarkers(
  backend: () => {
    readonly docker: Docker;
    readonly options: { readonly instanceId: string; readonly defaultImage: string; readonly engineTimeoutMs: number };
  },
): MarkerStore {
  let markers: SnapshotMarkers | undefined;
  const get = (): SnapshotMarkers => {
    if (markers === undefined) {
      const { docker, options } = backend();
      markers = new SnapshotMarkers({
        instanceId: options.instanceId,
        engine: docker,
        image: options.defaultImage,
        timeoutMs: options.engineTimeoutMs,
      });
    }
    return markers;
  };
  return {
    create: (tenant) => get().create(tenant),
    list: (tenant) => get().list(tenant),
    remove: (id) => get().remove(id),
  };
}
