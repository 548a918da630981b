/**
 * The facets of one backend session besides its processes: its filesystem, how it looks from
 * inside, its resource use, its disk and its hibernation.
 */
import type { DirectoryEntry, FileMetadata } from '../protocol/index.ts';

/** What `stat` and `readDirectory` report travels to clients as it is (`fs/getMetadata`, `fs/readDirectory`). */
export type { DirectoryEntry, FileMetadata } from '../protocol/index.ts';

/**
 * Filesystem of one session (the container's on docker). Paths are absolute and already
 * checked against the sandbox by the caller, except that `realpath` is how the caller
 * resolves symlinks before checking. Errors are `ExecServerError`s (see `fromErrno`).
 */
export interface SessionFs {
  /** Resolves symlinks and `..`; for a missing path, resolves the deepest existing ancestor and appends the rest. */
  realpath(path: string): Promise<string>;
  stat(path: string): Promise<FileMetadata>;
  readFile(path: string, maxBytes: number): Promise<Buffer>;
  /** Streams a file out; the stream ends at EOF. */
  openRead(path: string, offset: number): Promise<NodeJS.ReadableStream>;
  writeFile(path: string, data: Buffer): Promise<void>;
  /** Streams `source` into `path` (created or truncated); resolves with the bytes written. */
  writeStream(path: string, source: NodeJS.ReadableStream): Promise<number>;
  createDirectory(path: string, recursive: boolean): Promise<void>;
  readDirectory(path: string): Promise<DirectoryEntry[]>;
  remove(path: string, recursive: boolean, force: boolean): Promise<void>;
  copy(source: string, destination: string, recursive: boolean): Promise<void>;
}

/** What a session looks like from inside, for `environment/info` and `initialize`. */
export interface EnvironmentFacts {
  readonly shell: { readonly name: string; readonly path: string };
  readonly homeDir: string;
  /**
   * HOME of a sandboxed attempt when it runs as another user than an unsandboxed one (docker:
   * the sandbox user's home); absent when it is `homeDir`.
   */
  readonly sandboxHomeDir?: string | undefined;
  readonly tempDir: string;
  readonly platform: string;
  /** What `envPolicy.inherit` inherits: the executor's own environment (never the server's secrets). */
  readonly baseEnv: Readonly<Record<string, string>>;
}

/**
 * A session's resource use at one moment, as counters: callers derive rates (CPU percent)
 * from two samples. Docker: the engine's container stats; local: the session's process trees.
 */
export interface SessionStats {
  /** CPU time the session's processes have used, in nanoseconds (docker: the container's cgroup, cumulative; local: the live process trees, so it can drop when a command ends). */
  readonly cpuNanos: number;
  /** Memory in use now, in bytes (docker: the cgroup's usage; local: the sum of resident set sizes). */
  readonly memoryBytes: number;
  /** The most memory the session may use, when it is limited (docker: the container's limit). */
  readonly memoryLimitBytes?: number | undefined;
  /** Processes (and threads, on docker: the cgroup's pids count) alive now. */
  readonly pids: number;
  /** The most processes the session may have, when limited. */
  readonly pidsLimit?: number | undefined;
}

/**
 * The disk side of a session. `engine`: the engine enforces the limit itself (docker
 * `StorageOpt size`: writes past it fail with ENOSPC); `watch`: nothing below the server does,
 * so the server measures `usage()` periodically and stops the session past its limit.
 */
export interface BackendDisk {
  readonly enforcement: 'engine' | 'watch';
  /** Bytes the session uses now (docker: the container's writable layer; local: workspace and private /tmp); bounded by the backend's own deadline. */
  usage(): Promise<number>;
}

/** Where a session stands with hibernation (docker sessions under a runtime that checkpoints). */
export type HibernationState = 'awake' | 'hibernating' | 'hibernated' | 'waking';

/** Hibernation of one session: its container checkpointed with its memory, stopped, restored later. */
export interface BackendHibernation {
  readonly state: HibernationState;
  /** Why this session cannot hibernate (its runtime cannot checkpoint here), or undefined. */
  readonly unsupportedReason: string | undefined;
  /** When the current hibernation began; undefined while awake. */
  readonly hibernatedAt: Date | undefined;
  /** Checkpoints and stops the container; idempotent. Clear errors when it cannot. */
  hibernate(): Promise<void>;
  /** Restores the container; idempotent. Any call that needs the container wakes it too. */
  wake(): Promise<void>;
}
