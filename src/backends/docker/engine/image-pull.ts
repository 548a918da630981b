/**
 * Images a session needs: pulling one (one pull per image however many sessions wait for it),
 * its progress in the log and to every waiter, and the readiness of the default image
 * (`/readyz`, the boot check): present, being pulled, or missing with the command that builds it.
 */
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import type { TenantId } from '../../../ids.ts';
import { describeImagePull, type ImagePull } from '../../../protocol/index.ts';
import { statusOf, withDeadline } from './engine-client.ts';
import type { DockerLogger } from '../options.ts';

const PULL_TIMEOUT_MS = 10 * 60_000;
/** Progress lines at most this often, so a large pull does not flood the log. */
const LOG_EVERY_MS = 5000;
/** Progress to waiters at most this often (docs/protocol.md), plus the first and the last word. */
const NOTIFY_EVERY_MS = 500;

/** The image `scripts/build-session-image.sh` builds (and the server's default). */
export const SESSION_IMAGE = 'exec-server-session:latest';

interface PullEvent {
  status?: string;
  id?: string;
  progressDetail?: { current?: number; total?: number };
  error?: string;
}

/** Statuses after which a layer's bytes are all here. */
const LAYER_DONE = new Set([
  'Verifying Checksum',
  'Download complete',
  'Extracting',
  'Pull complete',
  'Already exists',
]);

/** Sums the engine's per-layer progress events into one figure. */
class PullProgress {
  readonly #layers = new Map<string, { current: number; total: number; done: boolean }>();

  add(e: PullEvent): void {
    // `Pulling from <repository>` names the tag, not a layer.
    if (e.id === undefined || e.status === undefined || e.status.startsWith('Pulling from')) return;
    const layer = this.#layers.get(e.id) ?? { current: 0, total: 0, done: false };
    if (e.status === 'Downloading' && e.progressDetail?.total) {
      layer.current = e.progressDetail.current ?? layer.current;
      layer.total = e.progressDetail.total;
    } else if (LAYER_DONE.has(e.status)) {
      layer.current = layer.total;
      layer.done = true;
    }
    this.#layers.set(e.id, layer);
  }

  figures(): Pick<ImagePull, 'currentBytes' | 'totalBytes' | 'layers' | 'layersDone'> {
    let currentBytes = 0;
    let totalBytes = 0;
    let layersDone = 0;
    for (const l of this.#layers.values()) {
      currentBytes += l.current;
      totalBytes += l.total;
      if (l.done) layersDone++;
    }
    return { currentBytes, totalBytes, layers: this.#layers.size, layersDone };
  }

  toString(): string {
    return describeImagePull(this.figures());
  }
}

/**
 * Pulls `image`, logging its progress (at most every 5 s) and calling `onEvent` after each engine
 * event. A failure, refused at once or reported inside the progress stream, is
 * EXEC_ERR_NOT_FOUND naming the image and the engine's reason.
 */
async function pullImage(
  docker: Docker,
  log: DockerLogger,
  image: string,
  progress: PullProgress,
  onEvent: () => void,
): Promise<void> {
  log.info({ image }, 'pulling image');
  let lastLog = Date.now();
  await withDeadline(`pull ${image}`, PULL_TIMEOUT_MS, async (abortSignal) => {
    const stream = await docker.pull(image, { abortSignal });
    await new Promise<void>((resolve, reject) => {
      let failure: string | undefined;
      docker.modem.followProgress(
        stream,
        // The engine reports a failure after the pull began (a blob it cannot fetch) as an event.
        (err) =>
          err ? reject(err) : failure !== undefined ? reject(execError('EXEC_ERR_BACKEND', failure)) : resolve(),
        (event: PullEvent) => {
          if (typeof event.error === 'string') failure ??= event.error;
          progress.add(event);
          onEvent();
          if (Date.now() - lastLog < LOG_EVERY_MS) return;
          lastLog = Date.now();
          log.info({ image, progress: progress.toString() }, 'pulling image');
        },
      );
    });
  }).catch((err: unknown) => {
    throw execError(
      'EXEC_ERR_NOT_FOUND',
      `image ${image} not found locally and cannot be pulled: ${(err as Error).message}${buildHint(image)}`,
      { cause: err },
    );
  });
  log.info({ image, progress: progress.toString() }, 'pulled image');
}

/** Who waits for a pull: the tenant it is listed for, and where its progress goes. */
export interface PullWaiter {
  readonly tenant?: TenantId | undefined;
  readonly onProgress?: ((pull: ImagePull) => void) | undefined;
}

interface Pull {
  readonly image: string;
  readonly startedAt: string;
  readonly progress: PullProgress;
  readonly waiters: Set<PullWaiter>;
  readonly done: Promise<void>;
  lastNotified: number;
  /** The figures last sent, so a notification always says something new. */
  lastFigures: string;
}

/**
 * The pulls in flight, one per image: a create that finds its image being pulled waits for that
 * pull, and every waiter gets its progress (at once on joining, then at most every 500 ms, and
 * the final `pulled` or `failed`).
 */
export class ImagePulls {
  readonly #docker: Docker;
  readonly #log: DockerLogger;
  readonly #pulls = new Map<string, Pull>();

  constructor(docker: Docker, log: DockerLogger) {
    this.#docker = docker;
    this.#log = log;
  }

  /** Pulls `image` (or joins its pull in flight); rejects as the pull does. */
  async pull(image: string, waiter: PullWaiter = {}): Promise<void> {
    const pull = this.#pulls.get(image) ?? this.#start(image);
    pull.waiters.add(waiter);
    waiter.onProgress?.(this.#state(pull, 'pulling'));
    try {
      await pull.done;
    } finally {
      pull.waiters.delete(waiter);
    }
  }

  /** The pulls `tenant` waits for now (`GET /v1/images/pulls`). */
  list(tenant: TenantId): ImagePull[] {
    return [...this.#pulls.values()]
      .filter((p) => [...p.waiters].some((w) => w.tenant === tenant))
      .map((p) => this.#state(p, 'pulling'));
  }

  #start(image: string): Pull {
    const progress = new PullProgress();
    const pull: Pull = {
      image,
      startedAt: new Date().toISOString(),
      progress,
      waiters: new Set(),
      lastNotified: Date.now(),
      lastFigures: JSON.stringify(progress.figures()),
      done: pullImage(this.#docker, this.#log, image, progress, () => {
        if (Date.now() - pull.lastNotified < NOTIFY_EVERY_MS) return;
        const state = this.#state(pull, 'pulling');
        const figures = JSON.stringify(progress.figures());
        // Nothing new (the engine is still resolving the image): nothing to say.
        if (figures === pull.lastFigures) return;
        pull.lastNotified = Date.now();
        pull.lastFigures = figures;
        this.#notify(pull, state);
      }).then(
        () => this.#end(pull, this.#state(pull, 'pulled')),
        (err: unknown) => {
          this.#end(pull, { ...this.#state(pull, 'failed'), error: (err as Error).message });
          throw err;
        },
      ),
    };
    this.#pulls.set(image, pull);
    return pull;
  }

  #end(pull: Pull, last: ImagePull): void {
    this.#pulls.delete(pull.image);
    this.#notify(pull, last);
  }

  #state(pull: Pull, phase: ImagePull['phase']): ImagePull {
    return { image: pull.image, phase, ...pull.progress.figures(), startedAt: pull.startedAt };
  }

  #notify(pull: Pull, state: ImagePull): void {
    for (const w of pull.waiters) {
      try {
        w.onProgress?.(state);
      } catch (err) {
        // A waiter that cannot take progress (its connection went) does not stop the pull.
        this.#log.warn({ image: pull.image, err: (err as Error).message }, 'image pull progress not delivered');
      }
    }
  }
}

/** How to get `image` without a registry, when the project builds it. */
function buildHint(image: string): string {
  return image === SESSION_IMAGE ? '; build it with: bash scripts/build-session-image.sh' : '';
}

type ImageState =
  | { readonly kind: 'unchecked' }
  | { readonly kind: 'present' }
  | { readonly kind: 'pulling'; progress: ImagePull | undefined }
  | { readonly kind: 'missing'; readonly reason: string };

/**
 * Readiness of the default image. The first check that finds it missing starts one pull in the
 * background (reported as "being pulled" meanwhile); once that failed, checks only look again,
 * so a built image makes the server ready without a restart.
 */
export class DefaultImage {
  readonly #docker: Docker;
  readonly #pulls: ImagePulls;
  readonly #image: string;
  readonly #log: DockerLogger;
  readonly #timeoutMs: number;
  #state: ImageState = { kind: 'unchecked' };
  #pull: Promise<void> | undefined;

  constructor(docker: Docker, pulls: ImagePulls, image: string, log: DockerLogger, timeoutMs: number) {
    this.#docker = docker;
    this.#pulls = pulls;
    this.#image = image;
    this.#log = log;
    this.#timeoutMs = timeoutMs;
  }

  /** Undefined when the image is there; else what is wrong and how to fix it. */
  async notReadyReason(): Promise<string | undefined> {
    if (this.#state.kind === 'pulling') {
      const p = this.#state.progress;
      return `default image ${this.#image} is being pulled (${p === undefined || p.layers === 0 ? 'starting' : describeImagePull(p)})`;
    }
    if (await this.#present()) {
      this.#state = { kind: 'present' };
      return undefined;
    }
    if (this.#pull === undefined) {
      const state: ImageState = { kind: 'pulling', progress: undefined };
      this.#state = state;
      this.#pull = this.#pulls.pull(this.#image, { onProgress: (p) => (state.progress = p) }).then(
        () => {
          this.#state = { kind: 'present' };
        },
        (err: unknown) => {
          const reason = `default image ${this.#image} is missing and cannot be pulled (${(err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message}); ${this.#fix()}`;
          this.#state = { kind: 'missing', reason };
          this.#log.warn({ image: this.#image }, reason);
        },
      );
      return `default image ${this.#image} is missing locally; pulling it`;
    }
    return this.#state.kind === 'missing'
      ? this.#state.reason
      : `default image ${this.#image} is missing; ${this.#fix()}`;
  }

  /** Resolves when the background pull (if any) has ended; for tests and the boot report. */
  async settled(): Promise<void> {
    await this.#pull;
  }

  #fix(): string {
    return this.#image === SESSION_IMAGE
      ? 'build it with: bash scripts/build-session-image.sh (or choose another image with --image)'
      : 'pull or build it, or choose another image with --image';
  }

  async #present(): Promise<boolean> {
    try {
      const image = this.#docker.getImage(this.#image);
      // dockerode's types omit `abortSignal` on inspect; docker-modem passes it on.
      await withDeadline('image inspect', this.#timeoutMs, (abortSignal) =>
        (image.inspect as (o: object) => Promise<unknown>).call(image, { abortSignal }),
      );
      return true;
    } catch (err) {
      if (statusOf((err as { cause?: unknown }).cause) === 404) return false;
      throw err;
    }
  }
}
