/** The one way file contents are streamed to the backend: uploads and write handles both use it. */
import { PassThrough } from 'node:stream';
import type { SessionFs } from '../../backends/types.ts';
import { execError, ExecServerError } from '../../errors.ts';

/**
 * `writeStream` fed through a stream of our own, so that a failing or aborted `source` (a
 * client that disconnects mid-upload, an aborted write handle) never reaches the backend as a
 * stream error: the feed is ended, the partial file removed, and the failure reported.
 * Resolves with the bytes written.
 *
 * `fs` is asked for inside, so that a session already gone rejects the returned promise
 * rather than throwing at the caller.
 */
export async function guardedWrite(
  fs: () => SessionFs,
  target: string,
  source: NodeJS.ReadableStream,
): Promise<number> {
  const backend = fs();
  const feed = new PassThrough({ highWaterMark: 1024 * 1024 });
  let failure: Error | undefined;
  /** The source failed or was aborted (not the backend): what was written is a partial file. */
  let sourceFailed = false;
  let ended = false;
  const fail = (err: Error): void => {
    if (failure || ended) return;
    failure = err;
    sourceFailed = true;
    source.unpipe(feed);
    feed.end();
  };
  source.on('error', fail);
  source.on('end', () => (ended = true));
  // Plain errors here never leave: the failure is reported below as EXEC_ERR_FS, with them as its cause.
  source.on('close', () => fail(new Error('the upload ended before its last byte')));
  source.pipe(feed);
  let bytes = 0;
  try {
    bytes = await backend.writeStream(target, feed);
  } catch (err) {
    failure ??= err instanceof Error ? err : new Error(String(err)); // reported as EXEC_ERR_FS below
    source.unpipe(feed);
    (source as NodeJS.ReadableStream & { resume(): void }).resume();
  }
  if (failure) {
    if (sourceFailed || !(failure instanceof ExecServerError))
      await backend.remove(target, false, true).catch(() => undefined);
    throw failure instanceof ExecServerError
      ? failure
      : execError('EXEC_ERR_FS', `${target}: write aborted: ${failure.message}; the partial file was removed`, {
          cause: failure,
          detail: { path: target },
        });
  }
  return bytes;
}
