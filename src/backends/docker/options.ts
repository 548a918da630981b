/**
 * Configuration of the docker backend, with the defaults the server gets when it passes none.
 */

import { availableParallelism } from 'node:os';
import type { FleetIdentity } from '../../config/fleet.ts';
import type { Logger } from '../../logger.ts';
import { DEFAULT_MAX_SNAPSHOTS, type SnapshotQuota } from './checkpoints/snapshot-quota.ts';

/** The docker backend logs through the server's logger (pino fits). */
export type DockerLogger = Pick<Logger, 'info' | 'warn' | 'error' | 'debug'>;

/** How the docker backend is configured; what is left out gets the defaults of `resolveOptions`. */
export interface DockerBackendOptions {
  /**
   * Engine address: `unix:///var/run/docker.sock`, a bare socket path, `tcp://host:2375`,
   * `http(s)://host:port`. Default: `DOCKER_HOST`, else `/var/run/docker.sock`.
   */
  readonly dockerHost?: string | undefined;
  /** Image used when a session names neither image nor snapshot. */
  readonly defaultImage: string;
  /**
   * Stable id of this server instance (labels every container; `recover()` adopts only its own).
   * Must survive restarts of the same deployment, and differ between deployments sharing an engine.
   */
  readonly instanceId: string;
  /**
   * How long `recover()` waits for another live server that holds the instance id on the engine
   * (instance-lease.ts) before failing with `EXEC_ERR_INSTANCE_IN_USE`. Default 60000 ms.
   */
  readonly instanceLeaseWaitMs?: number | undefined;
  /**
   * This server is one replica of a fleet (docs/architecture.md, "Fleet"): its own replica lease,
   * and recovery leaves the sessions of live replicas alone. Undefined: one server per instance id.
   */
  readonly fleet?: FleetIdentity | undefined;
  /** Workspace path when the session spec names none. Default `/workspace`. */
  readonly defaultWorkdir?: string | undefined;
  /** uid:gid the `restricted` (container-user) attempts run as. Default `1000:1000`. */
  readonly sandboxUser?: string | undefined;
  /**
   * Resources of a session that asks for nothing; used by the warm pool to decide whether a
   * spec matches a pre-started container. Defaults and maxima are applied above the backend.
   */
  readonly defaultResources?:
    | { readonly memoryMb: number; readonly cpus: number; readonly pids: number; readonly diskMb?: number | undefined }
    | undefined;
  /** Pre-started containers of the default image/policy kept ready at least. Default 0. */
  readonly warmPoolSize?: number | undefined;
  /**
   * Containers a warm pool holds at most once demand has sized it (pool-sizing.ts); 0 (or a
   * `warmPoolSize` of 0) turns the default runtime's pool off. Default `warmPoolSize` (a fixed pool).
   */
  readonly warmPoolMax?: number | undefined;
  /** How long a burst of demand keeps a pool sized for it before it shrinks toward its minimum. Default 300000 ms. */
  readonly warmPoolIdleMs?: number | undefined;
  /** Container creates this engine runs at once (sessions first, then pool refills). Default 16. */
  readonly createConcurrency?: number | undefined;
  /** Deadline for engine calls that must not hang (ping, create, inspect...). Default 5000 ms. */
  readonly engineTimeoutMs?: number | undefined;
  /** Deadline for `ping()` (readyz, fast failure). Default 2000 ms. */
  readonly pingTimeoutMs?: number | undefined;
  /** Size of the per-container tmpfs holding pid files. Default `16m`. */
  readonly controlTmpfsSize?: string | undefined;
  /**
   * How commands reach a session: `agent` (the exec agent inside the container, falling back to
   * `exec` per session when it cannot start there), or `exec` (one engine exec per command).
   * Default `agent`.
   */
  readonly execPath?: 'agent' | 'exec' | undefined;
  /** Output the agent keeps per process while no server is attached (the engine's retention). Default 1 MiB. */
  readonly retentionBytes?: number | undefined;
  /**
   * Gather a PTY command streaming fast on one CPU with the agent while it streams (the
   * operator's `--pty-pin`; changes the command's CPU affinity). Default off.
   */
  readonly ptyPinning?: boolean | undefined;
  /** The agent binary copied into containers. Default `build/exec-agent`. */
  readonly agentBinary?: string | undefined;
  /**
   * Output of one process the agent may send ahead of the server's acknowledgements. What is
   * in flight still arrives after the server pauses a process for a client that fell behind,
   * so it must stay well below what the server lets a client leave unread (`agentWindowFor`).
   * Default 2 MiB.
   */
  readonly agentWindowBytes?: number | undefined;
  /**
   * OCI runtime of session containers when the spec names none (`runc`, `runsc`...).
   * Default: the engine's own default runtime. Must be registered with the engine (checked by
   * `recover()` at startup). See runtimes.ts.
   */
  readonly runtime?: string | undefined;
  /**
   * A directory of the server's that the engine's host shares at the same path, where the
   * server listens for the exec agents (agent-links.ts); undefined: agents are reached through
   * the engine. Default: undefined (the server's configuration names one by default).
   */
  readonly agentSocketDir?: string | undefined;
  /** Runtimes a session may ask for; the default runtime is always allowed. Default: only it. */
  readonly allowedRuntimes?: readonly string[] | undefined;
  /** Warm-pool sizes of other runtimes than the default one (`warmPoolSize` is the default's). */
  readonly warmPoolRuntimes?: Readonly<Record<string, number>> | undefined;
  /** Containers kept restored from live templates, by template name or id (template-pool.ts). Default none. */
  readonly warmPoolTemplates?: Readonly<Record<string, number>> | undefined;
  /** Where memory checkpoints of live templates and forks are kept (root-only; docs/snapshots.md). */
  readonly checkpointDir?: string | undefined;
  /** The most memory (MiB) a session may use to be snapshotted or forked with it. */
  readonly checkpointMaxMb?: number | undefined;
  /** Snapshots a tenant may have, those being taken included (snapshot-quota.ts). Default 100. */
  readonly maxSnapshotsPerTenant?: number | undefined;
  /** The quota shared by the engines of a pool (engine-pool.ts); default: one of this engine's own. */
  readonly snapshotQuota?: SnapshotQuota | undefined;
}

/**
 * The agent's window for a server that cuts clients at `wsBufferLimitBytes` unread and pauses
 * commands at a quarter of it: an eighth of the limit (so a paused process's in-flight output
 * fits in what is left), at most 2 MiB, at least 64 KiB.
 */
export function agentWindowFor(wsBufferLimitBytes: number): number {
  return Math.max(64 * 1024, Math.min(2 * 1024 * 1024, Math.floor(wsBufferLimitBytes / 8)));
}

/** Options with every default filled in. */
export interface ResolvedDockerOptions {
  readonly dockerHost: string | undefined;
  readonly defaultImage: string;
  readonly instanceId: string;
  readonly instanceLeaseWaitMs: number;
  readonly fleet: FleetIdentity | undefined;
  readonly defaultWorkdir: string;
  readonly sandboxUser: string;
  readonly defaultResources: {
    readonly memoryMb: number;
    readonly cpus: number;
    readonly pids: number;
    readonly diskMb: number;
  };
  readonly warmPoolSize: number;
  readonly warmPoolMax: number;
  readonly warmPoolIdleMs: number;
  readonly createConcurrency: number;
  readonly engineTimeoutMs: number;
  readonly pingTimeoutMs: number;
  readonly controlTmpfsSize: string;
  readonly execPath: 'agent' | 'exec';
  readonly retentionBytes: number;
  readonly ptyPinning: boolean;
  readonly agentBinary: string | undefined;
  readonly agentWindowBytes: number;
  readonly agentSocketDir: string | undefined;
  readonly runtime: string | undefined;
  readonly allowedRuntimes: readonly string[];
  readonly warmPoolRuntimes: Readonly<Record<string, number>>;
  readonly warmPoolTemplates: Readonly<Record<string, number>>;
  readonly checkpointDir: string;
  readonly checkpointMaxMb: number;
  readonly maxSnapshotsPerTenant: number;
  readonly snapshotQuota: SnapshotQuota | undefined;
}

/** Half the host's CPUs, at least one: one busy session must not be able to take them all. */
function defaultCpus(): number {
  return Math.max(1, Math.floor(availableParallelism() / 2));
}

/** The options with every default filled in. */
export function resolveOptions(o: DockerBackendOptions): ResolvedDockerOptions {
  return {
    dockerHost: o.dockerHost,
    defaultImage: o.defaultImage,
    instanceId: o.instanceId,
    instanceLeaseWaitMs: Math.max(0, o.instanceLeaseWaitMs ?? 60_000),
    fleet: o.fleet,
    defaultWorkdir: o.defaultWorkdir ?? '/workspace',
    sandboxUser: o.sandboxUser ?? '1000:1000',
    defaultResources: {
      ...(o.defaultResources ?? { memoryMb: 2048, cpus: defaultCpus(), pids: 512 }),
      diskMb: o.defaultResources?.diskMb ?? 10_240,
    },
    warmPoolSize: Math.max(0, o.warmPoolSize ?? 0),
    warmPoolMax: (o.warmPoolSize ?? 0) <= 0 ? 0 : Math.max(o.warmPoolSize ?? 0, o.warmPoolMax ?? 0),
    warmPoolIdleMs: Math.max(1000, o.warmPoolIdleMs ?? 300_000),
    createConcurrency: Math.max(1, o.createConcurrency ?? 16),
    engineTimeoutMs: o.engineTimeoutMs ?? 5000,
    pingTimeoutMs: o.pingTimeoutMs ?? 2000,
    controlTmpfsSize: o.controlTmpfsSize ?? '16m',
    execPath: o.execPath ?? 'agent',
    retentionBytes: o.retentionBytes ?? 1024 * 1024,
    ptyPinning: o.ptyPinning === true,
    agentBinary: o.agentBinary,
    agentWindowBytes: o.agentWindowBytes ?? 2 * 1024 * 1024,
    agentSocketDir: o.agentSocketDir,
    runtime: o.runtime,
    allowedRuntimes: [...new Set(o.allowedRuntimes ?? [])],
    warmPoolRuntimes: o.warmPoolRuntimes ?? {},
    warmPoolTemplates: o.warmPoolTemplates ?? {},
    checkpointDir: o.checkpointDir ?? '/var/lib/exec-server/checkpoints',
    checkpointMaxMb: o.checkpointMaxMb ?? 4096,
    maxSnapshotsPerTenant: o.maxSnapshotsPerTenant ?? DEFAULT_MAX_SNAPSHOTS,
    snapshotQuota: o.snapshotQuota,
  };
}
