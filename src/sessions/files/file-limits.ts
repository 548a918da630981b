/** Per-session bounds on file operations, handles and watches (`SessionFiles`; `maxReadBytes` comes from `--fs-max-read-bytes`). */

export interface FileLimits {
  /** Largest `fs/readFile` answer (bytes); bigger files need chunked reads or the HTTP download. */
  readonly maxReadBytes: number;
  /** Largest block one `fs/readBlock` returns. */
  readonly maxBlockBytes: number;
  /** Open read plus write handles per session. */
  readonly maxHandles: number;
  /** A handle unused this long is closed (a write handle is aborted). */
  readonly handleIdleMs: number;
  /** `fs/watchMissing` watches per session, and paths per watch. */
  readonly maxWatches: number;
  readonly maxWatchPaths: number;
  /** How often watched paths are polled. */
  readonly watchIntervalMs: number;
}

/** The limits a session gets for every field its caller leaves unset. */
export const DEFAULT_FILE_LIMITS: FileLimits = {
  maxReadBytes: 64 * 1024 * 1024,
  maxBlockBytes: 8 * 1024 * 1024,
  maxHandles: 16,
  handleIdleMs: 10 * 60_000,
  maxWatches: 16,
  maxWatchPaths: 64,
  watchIntervalMs: 1000,
};
