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

/**
 * Runs `fn`, collecting and sampling every `everyMs`. Each reading waits `settleMs` after its
 * collection: newer V8s (Node 22+) free the backing stores of dead buffers on a background
 * thread, so memory read at once still counts them.
 */
export async function peakGrowth<T>(fn: () => Promise<T>, everyMs = 500, settleMs = 30): Promise<Growth<T>> {
  const settle = (): Promise<void> => new Promise((r) => setTimeout(r, settleMs));
  gc();
  await settle();
  const start = process.memoryUsage();
  let peakRss = start.rss;
  let peakLive = liveOf(start);
  const sample = async (): Promise<void> => {
    gc();
    await settle();
    const m = process.memoryUsage();
    peakRss = Math.max(peakRss, m.rss);
    peakLive = Math.max(peakLive, liveOf(m));
  };
  let running = true;
  const sampler = (async () => {
    while (running) {
      await new Promise((r) => setTimeout(r, everyMs));
      if (running) await sample();
    }
  })();
  const started = performance.now();
  try {
    const result = await fn();
    const ms = performance.now() - started;
    running = false;
    await sampler;
    await sample();
    return { result, rss: peakRss - start.rss, live: peakLive - liveOf(start), ms };
  } finally {
    running = false;
  }
}
