/**
 * OCI runtimes of session containers (`HostConfig.Runtime`): the server's default, the
 * allow-list a session may choose from, and what each runtime can do here (checkpoints).
 * The engine is the authority on which runtimes exist (`GET /info`), so nothing is assumed
 * from names alone: a runtime is checked against the engine at startup (the default) or when
 * a session asks for it. See docs/docker-backend.md, "Runtimes".
 */
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import { withDeadline } from './engine-client.ts';

/** What the engine says about its runtimes. */
export interface EngineRuntimes {
  /** The engine's `DefaultRuntime` (runc unless its operator changed it). */
  readonly engineDefault: string;
  /** Registered runtimes, by name, with the binary each runs. */
  readonly paths: Readonly<Record<string, string>>;
  /** `dockerd --experimental`: needed for checkpoints. */
  readonly experimental: boolean;
}

interface InfoShape {
  DefaultRuntime?: string;
  Runtimes?: Record<string, { path?: string }>;
  ExperimentalBuild?: boolean;
}

/** The runtimes the engine has and its default (`GET /info`). */
export async function readEngineRuntimes(docker: Docker, timeoutMs: number): Promise<EngineRuntimes> {
  const info = (await withDeadline('engine info', timeoutMs, (abortSignal) =>
    (docker.info as (o: object) => Promise<unknown>).call(docker, { abortSignal }),
  )) as InfoShape;
  const paths: Record<string, string> = {};
  for (const [name, r] of Object.entries(info.Runtimes ?? {})) paths[name] = r.path ?? name;
  return { engineDefault: info.DefaultRuntime ?? 'runc', paths, experimental: info.ExperimentalBuild === true };
}

/**
 * Host threads a gVisor sandbox needs on top of its commands: its pids limit applies to the
 * sandbox's host cgroup, where gVisor's own threads count too (about 56 idle, measured, and
 * more while commands block in system calls). Without this, a low `pids` keeps it from starting.
 */
export const GVISOR_PIDS_ALLOWANCE = 256;

/**
 * Whether a runtime's binary is gVisor's (registered under any name): `runsc` itself, or the
 * wrapper `scripts/start-dockerd.sh` registers in its place (`runsc-runtime`, see
 * scripts/runsc-runtime.sh).
 */
export function isGvisor(runtimePath: string | undefined): boolean {
  return runtimePath !== undefined && /(^|\/)runsc(-runtime)?$/.test(runtimePath);
}

/**
 * Why sessions of `runtime` cannot hibernate on this engine, or undefined when they can.
 * Checkpoints are supported for gVisor only: runc needs CRIU for them, which the server
 * does not rely on (Debian's CRIU fails its kernel check on common hosts).
 */
export function checkpointUnsupportedReason(engine: EngineRuntimes, runtime: string): string | undefined {
  if (!isGvisor(engine.paths[runtime])) {
    return `session runtime ${runtime} cannot checkpoint: hibernation needs a gVisor (runsc) session (runc checkpoints need CRIU, which this server does not use)`;
  }
  if (!engine.experimental)
    return `the docker engine is not in experimental mode (dockerd --experimental), which checkpoints need`;
  return undefined;
}

/** Resolves which runtime a session gets, checking the allow-list and the engine. */
export class RuntimeResolver {
  readonly #docker: Docker;
  readonly #configured: string | undefined;
  readonly #allowed: readonly string[];
  readonly #timeoutMs: number;
  #engine: Promise<EngineRuntimes> | undefined;

  constructor(docker: Docker, configured: string | undefined, allowed: readonly string[], timeoutMs: number) {
    this.#docker = docker;
    this.#configured = configured;
    this.#allowed = allowed;
    this.#timeoutMs = timeoutMs;
  }

  /** The engine's runtimes; `fresh` asks again (the operator may have registered one since). */
  engine(fresh = false): Promise<EngineRuntimes> {
    if (fresh || this.#engine === undefined) {
      const p = readEngineRuntimes(this.#docker, this.#timeoutMs);
      this.#engine = p;
      p.catch(() => {
        if (this.#engine === p) this.#engine = undefined;
      });
    }
    return this.#engine;
  }

  /** The server's default runtime: `--runtime`, else the engine's default. */
  async defaultRuntime(): Promise<string> {
    return this.#configured ?? (await this.engine()).engineDefault;
  }

  /** Runtimes a session may name: the allow-list plus the default. */
  async allowed(): Promise<string[]> {
    return [...new Set([await this.defaultRuntime(), ...this.#allowed])];
  }

  /** Startup check: the default runtime and every allowed one are registered with the engine. */
  async check(): Promise<void> {
    const engine = await this.engine(true);
    const dflt = await this.defaultRuntime();
    if (engine.paths[dflt] === undefined) {
      throw execError(
        'EXEC_ERR_CONFIG',
        `docker runtime ${dflt} (--runtime) is not registered with the engine; it has: ${Object.keys(engine.paths).sort().join(', ')}`,
      );
    }
  }

  /** The runtime a session asking for `requested` (or nothing) gets; clear errors otherwise. */
  async resolve(requested: string | undefined): Promise<string> {
    const runtime = requested ?? (await this.defaultRuntime());
    const allowed = await this.allowed();
    if (!allowed.includes(runtime)) {
      throw execError(
        'EXEC_ERR_INVALID_PARAMS',
        `session.runtime ${runtime} is not allowed on this server (allowed: ${allowed.join(', ')}; see --allowed-runtimes)`,
        {
          detail: { field: 'session.runtime' },
        },
      );
    }
    let engine = await this.engine();
    if (engine.paths[runtime] === undefined) engine = await this.engine(true);
    if (engine.paths[runtime] === undefined) {
      throw execError(
        'EXEC_ERR_CONFIG',
        `docker runtime ${runtime} is allowed here but not registered with the engine; it has: ${Object.keys(engine.paths).sort().join(', ')}`,
      );
    }
    return runtime;
  }
}
