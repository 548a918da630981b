/**
 * One session as a backend holds it (a workspace or a container), and what creating one takes.
 */
import type { Duplex } from 'node:stream';
import type { ContainerId, SessionId, TenantId } from '../ids.ts';
import type { ImagePull, SnapshotInfo } from '../protocol/index.ts';
import type {
  BackendProcess,
  ProcessSink,
  RecoveredProcess,
  ResolvedSandbox,
  SpawnRequest,
  SandboxType,
} from './process-types.ts';
import type { BackendDisk, BackendHibernation, EnvironmentFacts, SessionFs, SessionStats } from './session-facets.ts';

/** One session as its backend runs it: spawns commands, serves files, ends with `destroy`. */
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
   * session cannot have it (then the session is not created with a `network`). `offersSocket`:
   * the tunnel's agent can hand its client's socket to the proxy's native relay (src/egress/native-relay.ts).
   */
  enableEgress?(port: number, accept: (conn: Duplex, offersSocket?: boolean) => void): Promise<void>;
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
  /**
   * Optional: the session was used now, kept where a server that re-adopts it reads it back
   * (`RecoveredSession.notedAt`), so its idle clock goes on instead of starting again. Called at
   * most every few seconds; never wakes a hibernated session.
   */
  noteActivity?(): void;
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
   * Local backend: the host directories the session's workdir, writable roots and client
   * workspaces must lie in (`--local-host-dirs`, for a tenant not allowed danger-full-access);
   * undefined: anywhere.
   */
  readonly hostDirs?: readonly string[] | undefined;
  /** The extra writable roots of the session's policy, as the client named them. */
  readonly writableRoots?: readonly string[] | undefined;
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

/** How `BackendSession.snapshot` takes a snapshot. */
export interface SnapshotOptions {
  /** Keep the memory too (a live template). */
  readonly memory?: boolean | undefined;
}
