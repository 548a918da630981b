/** Polling for a condition the code under test reaches on its own time (a report, a restart). */
import assert from 'node:assert/strict';

/** Waits until `ok()` holds, checking every 10 ms for at most `ms`; fails naming `what`. */
export async function until(what: string, ok: () => boolean, ms = 10_000): Promise<void> {
  for (const end = Date.now() + ms; !ok() && Date.now() < end; ) await new Promise((r) => setTimeout(r, 10));
  assert.ok(ok(), what);
}
