/**
 * Whether another replica of a fleet still answers while a request of ours waits on it
 * (docs/architecture.md, "Fleet"): the one bound shared by forwarded HTTP calls
 * (fleet-forward.ts), relayed WebSocket handshakes (fleet-ws.ts) and the preview proxy
 * (src/preview/fleet-preview.ts).
 */
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';

/**
 * How long a forwarded request may wait for its answer while the owner's `/healthz` says nothing
 * either. A paused or wedged owner still accepts connections (the kernel does) and keeps its
 * lease (its engine connection stays open), so without this the caller waited for ever. A slow
 * answer of a live owner (an `exec_command` that waits for its command) is not cut: its
 * `/healthz` answers meanwhile.
 */
export const OWNER_SILENCE_MS = 10_000;
const PROBE_EVERY_MS = 2_000;

/** Whether the replica at `base` answers `/healthz` within `ms`. */
function answers(base: string, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const url = new URL('/healthz', base);
    const https = url.protocol === 'https:';
    // A connection of its own: one kept alive might be the very one the owner stopped reading.
    const probe = (https ? httpsRequest : httpRequest)(url, { agent: false, timeout: ms });
    probe.on('response', (res) => {
      res.resume();
      resolve(true);
    });
    probe.on('timeout', () => probe.destroy());
    probe.on('error', () => resolve(false));
    probe.end();
  });
}

/**
 * Calls `silent` once the replica at `base` has answered neither the request nor its `/healthz`
 * for OWNER_SILENCE_MS; the returned function stops watching (the answer came, or the request
 * ended). Also the bound of a relayed WebSocket's handshake (fleet-ws.ts).
 */
export function watchOwner(base: string, silent: () => void): () => void {
  let lastHeard = Date.now();
  let watching = true;
  const timer = setInterval(() => {
    void answers(base, PROBE_EVERY_MS).then((alive) => {
      if (alive) lastHeard = Date.now();
      // A probe still out when the answer came must not cut what is now being answered.
      else if (watching && Date.now() - lastHeard >= OWNER_SILENCE_MS) silent();
    });
  }, PROBE_EVERY_MS);
  timer.unref();
  return () => {
    watching = false;
    clearInterval(timer);
  };
}
