/**
 * Images a session needs: pulling one with its progress in the log, and the readiness of the
 * default image (`/readyz`, the boot check): present, being pulled, or missing with the command
 * that builds it.
 */
import type Docker from 'dockerode';
import { execError } from '../../errors.ts';
import { statusOf, withDeadline } from './engine-client.ts';
import type { DockerLogger } from './options.ts';

const PULL_TIMEOUT_MS = 10 * 60_000;
/** Progress lines at most this often, so a large pull does not flood the log. */
const PROGRESS_EVERY_MS = 5000;

/** The image `scripts/build-session-image.sh` builds (and the server's default). */
export const SESSION_IMAGE = 'exec-server-session:latest';

interface PullEvent {
  status?: string;
  id?: string;
  progressDetail?: { current?: number; total?: number };
}

/** Sums per-layer progress events into one "N of M MB" figure. */
class PullProgress {
  readonly #layers = new Map<string, { current: number; total: number }>();

  add(e: PullEvent): void {
    if (e.id === undefined) return;
    const layer = this.#layers.get(e.id) ?? { current: 0, total: 0 };
    if (e.status === 'Downloading' && e.progressDetail?.total) {
      layer.current = e.progressDetail.current ?? layer.current;
      layer.total = e.progressDetail.total;
    } else if (e.status === 'Download complete' || e.status === 'Pull complete' || e.status === 'Already exists') {
      layer.current = layer.total;
    }
    this.#layers.set(e.id, layer);
  }

  toString(): string {
    let current = 0;
    let total = 0;
    for (const l of this.#layers.values()) {
      current += l.current;
      total += l.total;
    }
    const mb = (n: number): string => (n / 1e6).toFixed(1);
    return total > 0 ? `${mb(current)} of ${mb(total)} MB, ${this.#layers.size} layers` : `${this.#layers.size} layers`;
  }
}

/**
 * Pulls `image`, logging its progress (at most every 5 s) and `onProgress` for each summary.
 * A failure is EXEC_ERR_NOT_FOUND naming the image and the engine's reason.
 */
export async function pullImage(
  docker: Docker,
  log: DockerLogger,
  image: string,
  onProgress?: (summary: string) => void,
): Promise<void> {
  log.info({ image }, 'pulling image');
  const progress = new PullProgress();
  let lastReport = Date.now();
  await withDeadline(`pull ${image}`, PULL_TIMEOUT_MS, async (abortSignal) => {
    const stream = await docker.pull(image, { abortSignal });
    await new Promise<void>((resolve, reject) => {
      docker.modem.followProgress(
        stream,
        (err) => (err ? reject(err) : resolve()),
        (event: PullEvent) => {
          progress.add(event);
          if (Date.now() - lastReport < PROGRESS_EVERY_MS) return;
          lastReport = Date.now();
          const summary = progress.toString();
          log.info({ image, progress: summary }, 'pulling image');
          onProgress?.(summary);
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

/** How to get `image` without a registry, when the project builds it. */
function buildHint(image: string): string {
  return image === SESSION_IMAGE ? '; build it with: bash scripts/build-session-image.sh' : '';
}

type ImageState =
  | { readonly kind: 'unchecked' }
  | { readonly kind: 'present' }
  | { readonly kind: 'pulling'; progress: string }
  | { readonly kind: 'missing'; readonly reason: string };

/**
 * Readiness of the default image. The first check that finds it missing starts one pull in the
 * background (reported as "being pulled" meanwhile); once that failed, checks only look again,
 * so a built image makes the server ready without a restart.
 */
export class DefaultImage {
  readonly #docker: Docker;
  readonly #image: string;
  readonly #log: DockerLogger;
  readonly #timeoutMs: number;
  #state: ImageState = { kind: 'unchecked' };
  #pull: Promise<void> | undefined;

  constructor(docker: Docker, image: string, log: DockerLogger, timeoutMs: number) {
    this.#docker = docker;
    this.#image = image;
    this.#log = log;
    this.#timeoutMs = timeoutMs;
  }

  /** Undefined when the image is there; else what is wrong and how to fix it. */
  async notReadyReason(): Promise<string | undefined> {
    if (this.#state.kind === 'pulling') return `default image ${this.#image} is being pulled (${this.#state.progress})`;
    if (await this.#present()) {
      this.#state = { kind: 'present' };
      return undefined;
    }
    if (this.#pull === undefined) {
      const state: ImageState = { kind: 'pulling', progress: 'starting' };
      this.#state = state;
      this.#pull = pullImage(this.#docker, this.#log, this.#image, (summary) => (state.progress = summary)).then(
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
