/**
 * The boundary between the backend-independent engine and the places commands really run.
 * Nothing above `src/backends/` imports dockerode or starts a process; everything goes through here.
 */
import type { Duplex } from 'node:stream';
import type { ContainerId, SessionId, TenantId } from '../ids.ts';
import type { FleetBackend } from './fleet-types.ts';
import type {
  DirectoryEntry,
  FileMetadata,
  ImagePull,
  SignalName,
  SnapshotInfo,
  StreamName,
} from '../protocol/index.ts';

/** Sandbox mechanism of an attempt, as reported to clients (`sandboxType`). */
export type SandboxType = 'none' | 'bubblewrap' | 'container-user';

/**
 * A sandbox as the backend must enforce it for one attempt, already resolved from the
 * session policy (paths absolute, inside the session's filesystem).
 * `unrestricted`: no sandbox at all (sandbox type `none`).
 * `restricted`: the whole filesystem readable except `denyRead`; only `writableRoots` writable
 * (empty for `read-only`); network only when `network` is true.
 */
export type ResolvedSandbox =
  | { readonly kind: 'unrestricted' }
  | {
      readonly kind: 'restricted';
      readonly writableRoots: readonly string[];
      readonly denyRead: readonly string[];
      readonly network: boolean;
    };

/** How the process's stdio is wired. */
export type SpawnMode = 'pty' | 'pipe' | 'pipe-no-stdin';

/** Output stream labels and client signals are wire names, defined by the protocol. */
export { SIGNAL_NAMES, type SignalName, type StreamName } from '../protocol/index.ts';

export interface TerminalSize {
  readonly cols: number;
  readonly rows: number;
}

export interface SpawnRequest {
  readonly argv: readonly string[];
  /** Replaces argv[0] as seen by the program (the executable is still argv[0]). */
  readonly arg0?: string | undefined;
  /** Absolute path inside the session's filesystem. */
  readonly cwd: string;
  /** The complete environment (already built from envPolicy + env by the engine). */
  readonly env: Readonly<Record<string, string>>;
  readonly mode: SpawnMode;
  readonly size: TerminalSize;
  readonly sandbox: ResolvedSandbox;
  /**
   * Opaque to the backend: what the engine needs to re-adopt this process after a server
   * restart. Backends whose processes survive the server keep it and hand it back from
   * `recover()`; others ignore it.
   */
  readonly recoveryTag?: string | undefined;
}

/** How a backend process ended. `lost`: the backend cannot tell (container gone, engine lost). */
export type BackendExit =
  | { readonly kind: 'exited'; readonly code: number }
  | { readonly kind: 'signaled'; readonly signal: string; readonly signo: number }
  | { readonly kind: 'lost'; readonly reason: string };

/**
 * Where a backend delivers what a process does. Passed to `spawn` so nothing can be emitted
 * before a listener exists. Contract: `output` is called in order; `exit` is called exactly
 * once and only after the last `output` (backends must guard against output-after-exit).
 * The sink never applies backpressure: the engine always drains. `output` copies what it keeps
 * before it returns, so a backend may reuse `data`'s memory for its next read.
 */
export interface ProcessSink {
  output(stream: StreamName, data: Buffer): void;
  exit(result: BackendExit): void;
}

/** A running process as the backend sees it. All methods are safe to call after exit. */
export interface BackendProcess {
  /** Sandbox mechanism this attempt really runs under. */
  readonly sandboxType: SandboxType;
  write(data: Buffer): Promise<void>;
  closeStdin(): Promise<void>;
  resize(size: TerminalSize): Promise<void>;
  /** Delivers `signal` to the command's whole process group. */
  signal(signal: SignalName): Promise<void>;
  /**
   * Stops reading the process's output (it blocks once its pipe or terminal buffer is full)
   * until `resumeOutput`. Used only while an attached client is behind; idempotent.
   */
  pauseOutput(): void;
  resumeOutput(): void;
  /**
   * Optional: the engine published this process's output through byte `endOffset` (counted
   * over everything the backend gave the sink) as the log event `seq`. Backends whose
   * processes survive the server keep these marks to rebuild the same seqs after a restart.
   */
  acknowledge?(seq: number, endOffset: number): void;
  /** Optional: the engine no longer needs the process (pruned); the backend may drop its record. */
  dispose?(): void;
}

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

export interface BackendSession {
  readonly id: SessionId;
  /** OCI runtime the session's container runs under (docker: `runc`, `runsc`...). */
  readonly runtime?: string | undefined;
  /** Present on backends that can hibernate sessions (docker). */
  readonly hibernation?: BackendHibernation | undefined;
  /** The session's workspace: absolute path inside its filesystem. */
  readonly workdir: string;
  readonly containerId?: ContainerId | undefined;
  readonly image?: string | undefined;
  /** Sandbox type a `restricted` attempt gets here; `none` when no mechanism is available. */
  readonly sandboxType: SandboxType;
  /** Why `sandboxType` is `none` although sandboxing was wanted (e.g. bwrap missing). */
  readonly sandboxUnavailableReason?: string | undefined;
  readonly fs: SessionFs;
  readonly environment: EnvironmentFacts;
  /**
   * How commands reach the session (docker): `agent` (the exec agent inside the container) or
   * `exec` (one engine exec per command, the fallback). Undefined on backends without a choice.
   */
  readonly execPath?: 'agent' | 'exec' | undefined;
  /** Why `execPath` is `exec` (the agent could not start there, or the server runs without it). */
  readonly execPathReason?: string | undefined;
  /**
   * On the agent path (docker): whether the server reaches the agent by its socket directly or
   * through an attached engine exec (undefined before the first connection).
   */
  readonly agentTransport?: 'socket' | 'exec-stream' | undefined;
  /** Resolves once the process runs (the early-exit window starts then). */
  spawn(request: SpawnRequest, sink: ProcessSink): Promise<BackendProcess>;
  /**
   * Optional: makes `path` (absent from the session's filesystem) a symlink to the workspace,
   * creating its parent directories, so commands can `cd` to and name paths under the client's
   * working directory. Resolves true when the link exists afterwards; false when it cannot be
   * made (the caller then maps the path without a link). Docker only.
   */
  aliasPath?(path: string): Promise<boolean>;
  /**
   * Optional (local): a directory of the client's on the host that commands and fs calls must
   * see at its own path, even under /tmp, which the sandbox's private /tmp would hide.
   * `workspace`: it is the client's working directory (`environmentConfig/read`), a workspace of
   * the session like `workdir` (listed in `clientWorkspaces`); otherwise a command's cwd.
   */
  clientDirectory?(path: string, workspace: boolean): Promise<void>;
  /** Optional (local): the client's working directories that are workspaces of the session too. */
  readonly clientWorkspaces?: readonly string[] | undefined;
  /** Optional: how the session's disk limit is enforced and measured (see `BackendDisk`). */
  readonly disk?: BackendDisk | undefined;
  /** Optional: the session's resource use now (one sample; bounded by the backend's own deadline). */
  stats?(): Promise<SessionStats>;
  /**
   * Optional: prepares what a `restricted` attempt under `sandbox` needs (docker: the
   * container-user layout) ahead of the first command. Spawns under the same sandbox find it
   * done; a later change of layout is applied by `spawn` itself.
   */
  prepareSandbox?(sandbox: ResolvedSandbox): Promise<void>;
  /**
   * Optional: a TCP connection to `port` on the loopback that commands running under `sandbox`
   * (the session's own) see, for preview ports. Never grants the session network: docker
   * reaches the container through the engine, local through the sandbox's namespace.
   */
  connectPort?(port: number, sandbox: ResolvedSandbox): Promise<Duplex>;
  /**
   * Optional: the session's egress proxy (docs/architecture.md, "Egress"). Something listens on
   * 127.0.0.1:`port` inside the session's own network namespace and hands every connection a
   * command makes there to `accept`, whose proxy decides where it may go; the session gets no
   * other network. Docker: the exec agent listens and tunnels over its link. Rejects when the
   * session cannot have it (then the session is not created with a `network`).
   */
  enableEgress?(port: number, accept: (conn: Duplex) => void): Promise<void>;
  /**
   * Commits the session's filesystem to a snapshot image; with `memory` (docker, gVisor) also
   * its memory: a live template, whose sessions start with its processes running.
   */
  snapshot(name: string | undefined, options?: SnapshotOptions): Promise<SnapshotInfo>;
  /**
   * Optional: a session restored from a memory snapshot hands the processes it brought (running
   * or ended) to `adopt`, as a recovered session does (`RecoveredSession.adoptProcesses`).
   */
  adoptRestored?(adopt: (p: RecoveredProcess, process: BackendProcess) => ProcessSink | undefined): Promise<number>;
  /**
   * Keeps `record` (the session's policy, opaque to the backend) where `recover()` finds it
   * again, out of reach of sandboxed commands. Backends without recovery ignore it.
   */
  persistRecord(record: string): Promise<void>;
  /** Called when the session dies under us (container killed from outside). */
  onLost(listener: (reason: string) => void): void;
  /**
   * Optional: ends every process of the session, including those a command left running in
   * the background and those that left their process group; the session stays usable.
   */
  killAll?(): Promise<void>;
  /** Kills everything and frees resources. Idempotent. */
  destroy(): Promise<void>;
}

/** Session creation parameters after defaults and maxima are applied. */
export interface BackendSessionSpec {
  readonly id: SessionId;
  readonly tenant: TenantId;
  readonly image?: string | undefined;
  readonly snapshot?: string | undefined;
  /** Requested workspace path (absolute); the backend picks one when absent. */
  readonly workdir?: string | undefined;
  readonly labels: Readonly<Record<string, string>>;
  /** `diskMb`: the disk limit (absent: none asked for; the docker backend then uses its default). */
  readonly resources: {
    readonly memoryMb: number;
    readonly cpus: number;
    readonly pids: number;
    readonly diskMb?: number | undefined;
  };
  /** Whether the session's policy grants network (docker: otherwise NetworkMode none). */
  readonly network: boolean;
  /** OCI runtime asked for (docker); undefined: the server's default. */
  readonly runtime?: string | undefined;
  /**
   * Whether the session's commands run sandboxed (its policy is not danger-full-access): its
   * file operations then see the files as its sandboxed commands do (local backend).
   */
  readonly sandboxed?: boolean | undefined;
  /**
   * Where the progress of a pull this creation waits for goes (docker: the image is missing
   * locally): at once, at most every 500 ms, and a last `pulled` or `failed`.
   */
  readonly onImagePull?: ((pull: ImagePull) => void) | undefined;
}

/** Where a pull of a session's image stands, as clients see it (`session/imagePull`, `/v1/images/pulls`). */
export type { ImagePull } from '../protocol/index.ts';

/** A snapshot as clients see it (`session/snapshot`, `/v1/snapshots`). */
export type { SnapshotInfo } from '../protocol/index.ts';

export interface SnapshotOptions {
  /** Keep the memory too (a live template). */
  readonly memory?: boolean | undefined;
}

import type { RecoveredProcess, RecoveredSession } from './recovery-types.ts';
export type { RecoveredProcess, RecoveredSession } from './recovery-types.ts';

/** One engine of the pool as `/readyz` and `/metrics` report it. */
export interface EngineReport {
  /** The engine's address as configured (`unix:///...`, `tcp://host:port`). */
  readonly engine: string;
  readonly healthy: boolean;
  /** Sessions this server holds on it. */
  readonly sessions: number;
  /** Why it is not healthy or not ready (no answer, default image missing...). */
  readonly reason?: string | undefined;
}

export type BackendKind = 'local' | 'docker';

export type { FleetBackend, FleetLocation, FleetSession } from './fleet-types.ts';

export interface Backend {
  readonly kind: BackendKind;
  /** Throws `EXEC_ERR_BACKEND_UNAVAILABLE` quickly when the backend cannot serve (readyz). */
  ping(): Promise<void>;
  /**
   * Why a default session cannot start although `ping` succeeds (docker: the default image is
   * missing, or still being pulled), naming the fix; undefined when ready. Reported by
   * `/readyz` and at boot. Absent on backends with no such precondition.
   */
  notReadyReason?(): Promise<string | undefined>;
  /** Optional: the image pulls in flight that `tenant`'s session creations wait for (docker). */
  imagePulls?(tenant: TenantId): ImagePull[];
  createSession(spec: BackendSessionSpec): Promise<BackendSession>;
  /**
   * Startup recovery: sessions this server instance left behind that can be re-adopted
   * (their processes are gone; the filesystem lives on). Orphans that cannot be adopted are
   * removed by the backend itself.
   */
  recover(): Promise<RecoveredSession[]>;
  /** Snapshots owned by `tenant` (all when undefined). */
  listSnapshots(tenant: TenantId | undefined): Promise<SnapshotInfo[]>;
  deleteSnapshot(snapshotId: string, tenant: TenantId | undefined): Promise<void>;
  /** Optional: the memory checkpoints (live templates, forks) this backend keeps, for /metrics. */
  memoryCheckpoints?(): { readonly count: number; readonly bytes: number };
  /** Stops everything this backend created (server shutdown). */
  close(): Promise<void>;
  /**
   * Optional (docker): closes the backend leaving every session and process running for the
   * next server of the instance, as a killed server would (`--shutdown-sessions keep`).
   */
  handOver?(): Promise<void>;
  /** Optional: the engines of a pool with their health and sessions (`/readyz`, `/metrics`). */
  engines?(): EngineReport[];
  /** Present when this server is one replica of a fleet (`--fleet`, docker). */
  readonly fleet?: FleetBackend | undefined;
}
