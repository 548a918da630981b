/**
 * What every container of one image has in common and a create would otherwise ask the engine
 * for each time: the shell (`bash` or `/bin/sh`, found by the setup exec) and the environment
 * an exec sees (from the container's inspect). Learnt from the first container of an image,
 * then reused for a while, so a create of a known image is create, start and the agent's start.
 * A pull may change what an image name stands for: it forgets the image.
 */

export interface ImageFact {
  readonly shellPath: string;
  readonly baseEnv: Readonly<Record<string, string>>;
}

/** How long a fact is trusted (an image retagged behind the server's back is seen again after it). */
const TTL_MS = 10 * 60_000;
/** Images remembered at most (the oldest is dropped). */
const MAX_IMAGES = 256;

/** What is known of each image (its shell, its environment), for a while and for a bounded number of images. */
export class ImageFacts {
  readonly #facts = new Map<string, { fact: ImageFact; at: number }>();

  get(image: string, now = Date.now()): ImageFact | undefined {
    const hit = this.#facts.get(image);
    if (hit === undefined) return undefined;
    if (now - hit.at > TTL_MS) {
      this.#facts.delete(image);
      return undefined;
    }
    return hit.fact;
  }

  set(image: string, fact: ImageFact, now = Date.now()): void {
    this.#facts.delete(image);
    this.#facts.set(image, { fact, at: now });
    if (this.#facts.size > MAX_IMAGES) this.#facts.delete(this.#facts.keys().next().value!);
  }

  forget(image: string): void {
    this.#facts.delete(image);
  }
}
