/**
 * A batch of sessions of one spec (`POST /v1/sessions?count=N`): made side by side (the backend
 * bounds how many creates its engine runs at once), answered all together, or not at all.
 */
import { execError, toExecError } from '../errors.ts';

/** How a batch makes and removes one session; the batch makes all or none. */
export interface BatchSteps<S> {
  /** Makes one session (with the server's per-session checks). */
  readonly create: () => Promise<S>;
  /** Removes a session of a batch that failed. */
  readonly destroy: (session: S) => Promise<void>;
}

/**
 * `count` sessions, or an error after every session already made is destroyed again. `room` is
 * how many more sessions the limits allow (server and tenant): a batch larger fails at once
 * with `EXEC_ERR_SESSION_LIMIT`, before anything is made.
 */
export async function createBatch<S>(count: number, room: number, steps: BatchSteps<S>): Promise<S[]> {
  if (count > room)
    throw execError(
      'EXEC_ERR_SESSION_LIMIT',
      `a batch of ${count} sessions does not fit: the session limits leave room for ${Math.max(0, room)}`,
    );
  const results = await Promise.allSettled(Array.from({ length: count }, () => steps.create()));
  const made = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failed = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
  if (failed.length === 0) return made;
  // None is kept: a caller that gets an error owns no session of the batch.
  await Promise.all(made.map((s) => steps.destroy(s).catch(() => undefined)));
  const first = toExecError(failed[0]);
  throw execError(
    first.code,
    `batch create failed: ${failed.length} of ${count} sessions could not be made (the ${made.length} made were removed): ${first.message}`,
    { cause: first, detail: { ...first.detail, batch: { count, failed: failed.length, removed: made.length } } },
  );
}
