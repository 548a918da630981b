/**
 * Peak memory growth while a function runs, for the bounded-memory tests of large transfers.
 *
 * Live memory, not garbage: a 200 MiB stream passes hundreds of MiB of buffers through, and V8
 * frees them only when its external-memory trigger fires, so a peak of RSS or of heap plus
 * buffers alone says more about the collector's timing than about buffering (it came out at
 * 60-95 MiB either way, and a scavenge alone leaves what was promoted). So every `everyMs` the
 * sampler runs a full collection (exposed at run time) and then reads heap plus buffers: a
 * collection of the test process's heap costs tens of milliseconds, hence not more often.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const liveOf = (m: NodeJS.MemoryUsage): number => m.heapUsed + m.arrayBuffers;

export interface Growth<T> {
  readonly result: T;
  /** Peak growth of the resident set, in bytes. */
  readonly rss: number;
  /** Peak growth of live heap plus Buffer memory (sampled after a full collection), in bytes. */
  readonly live: number;
  readonly ms: number;
}

/** Runs `fn`, collecting and sampling every `everyMs`. */
export async function peakGrowth<T>(fn: () => Promise<T>, everyMs = 500): Promise<Growth<T>> {
  gc();
  const start = process.memoryUsage();
  let peakRss = start.rss;
  let peakLive = liveOf(start);
  const sample = (): void => {
    gc();
    const m = process.memoryUsage();
    peakRss = Math.max(peakRss, m.rss);
    peakLive = Math.max(peakLive, liveOf(m));
  };
  const timer = setInterval(sample, everyMs);
  const started = performance.now();
  try {
    const result = await fn();
    sample();
    return { result, rss: peakRss - start.rss, live: peakLive - liveOf(start), ms: performance.now() - started };
  } finally {
    clearInterval(timer);
  }
}
