/**
 * A session backed by one container: spawns processes in it, prepares the container-user
 * sandbox, snapshots it, and turns the container's death into `lost` for every process.
 */
import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import { execError } from '../../errors.ts';
import type { ContainerId, SessionId, TenantId } from '../../ids.ts';
import type {
  BackendProcess,
  BackendSession,
  EnvironmentFacts,
  ProcessSink,
  RecoveredProcess,
  ResolvedSandbox,
  SandboxType,
  SessionFs,
  SessionStats,
  SnapshotInfo,
  SnapshotOptions,
  SpawnRequest,
} from '../types.ts';
import { createContainerFs } from './container/container-fs.ts';
import { statusOf, withDeadline } from './engine/engine-client.ts';
import { closeExecStreams, runControl } from './exec/exec-runner.ts';
import { type DockerProcess, spawnDockerProcess, type ProcessHost } from './exec/docker-process.ts';
import { connectContainerPort } from './container/port-forward.ts';
import type { DockerLogger, ResolvedDockerOptions } from './options.ts';
import { CLEANUP_SCRIPT, RECORD_FILE } from './exec/scripts.ts';
import { SandboxLayout } from './exec/sandbox-layout.ts';
import { recoverExecCommands } from './exec/exec-recovery.ts';
import { ControlGate, killAllProcesses } from './exec/kill-all.ts';
import { commitSnapshot } from './checkpoints/snapshots.ts';
import type { AgentChannel } from './agent/agent-channel.ts';
import { agentRunner, execRunner, type ControlRunner } from './exec/control-runner.ts';
import { checkSpawn } from './exec/spawn-check.ts';
import { containerStats } from './container/stats.ts';

/**
 * HOME of the sandbox user (uid 1000) in the images this project builds (scripts/build-*-image.sh,
 * docker/session.Dockerfile). In another image whose sandbox user has no readable home there,
 * the exec wrapper falls back to the user's /etc/passwd entry, then /tmp.
 */
const SANDBOX_HOME = '/home/sandbox';

/** What a docker session is made with: its container, its engine, its agent and its options. */
export interface DockerSessionInit {
  readonly id: SessionId;
  readonly tenant: TenantId;
  readonly docker: Docker;
  readonly containerId: ContainerId;
  readonly image: string;
  readonly workdir: string;
  readonly shellPath: string;
  /** What an exec inherits from the image (`Config.Env`, plus HOME). */
  readonly baseEnv: Readonly<Record<string, string>>;
  readonly options: ResolvedDockerOptions;
  readonly log: DockerLogger;
  /** The exec agent (commands go through it); undefined: one engine exec per command. */
  readonly agent?: AgentChannel | undefined;
  /** Why there is no agent. */
  readonly agentUnavailable?: string | undefined;
  /** The backend forgets the session (after destroy). */
  readonly forget: (session: DockerSession) => void;
  /** Fleet: why another replica owns this session now, if so (then never attached nor removed from here). */
  readonly movedTo?: (() => Promise<string | undefined>) | undefined;
  /** Fleet: removes the session's claims once its container is gone (they use its image). */
  readonly released?: (() => Promise<void>) | undefined;
}

/**
 * `$1` becomes a symlink to the workspace `$2`: already that link -> ok; anything else there ->
 * exit 3; otherwise the parents are created (mode 755) and the link made.
 */
const ALIAS_SCRIPT =
  'if [ -L "$1" ] && [ "$(readlink "$1")" = "$2" ]; then exit 0; fi; if [ -e "$1" ] || [ -L "$1" ]; then exit 3; fi; umask 022; mkdir -p "$(dirname "$1")" && ln -s "$2" "$1"';

/** Pid files removed in one batch (each costs a tmpfs page until removed). */
const CLEANUP_BATCH = 32;

/** A session backed by one container: spawns in it, serves its files, snapshots it. */
export class DockerSession implements BackendSession {
  readonly id: SessionId;
  readonly tenant: TenantId;
  readonly workdir: string;
  readonly containerId: ContainerId;
  readonly image: string;
  readonly sandboxType: SandboxType = 'container-user';
  readonly sandboxUnavailableReason = undefined;
  readonly fs: SessionFs;
  readonly environment: EnvironmentFacts;
  readonly container: Docker.Container;
  readonly #init: DockerSessionInit;
  readonly #log: DockerLogger;
  readonly #processes = new Set<DockerProcess>();
  readonly #lostListeners: Array<(reason: string) => void> = [];
  #lost: string | undefined;
  #destroying = false;
  /** A destroy in progress or done; reset when a try fails, so the next may run. */
  #removing = false;
  /** The container-user sandbox's layout (sandbox-layout.ts). */
  readonly #layout: SandboxLayout;
  #finishedPidFiles: string[] = [];
  readonly #host: ProcessHost;
  readonly #agent: AgentChannel | undefined;
  /** Control commands: through the agent when there is one. */
  readonly #runner: ControlRunner;
  /** Holds short control commands while `killAll` runs (kill-all.ts). */
  readonly #gate = new ControlGate();

  constructor(init: DockerSessionInit) {
    this.#init = init;
    this.#log = init.log;
    this.id = init.id;
    this.tenant = init.tenant;
    this.workdir = init.workdir;
    this.containerId = init.containerId;
    this.image = init.image;
    this.container = init.docker.getContainer(init.containerId);
    const shellName = init.shellPath.split('/').pop() ?? 'sh';
    this.environment = {
      shell: { name: shellName, path: init.shellPath },
      homeDir: '/root',
      sandboxHomeDir: SANDBOX_HOME,
      tempDir: '/tmp',
      platform: 'linux',
      baseEnv: init.baseEnv,
    };
    this.#agent = init.agent;
    const runner = this.#agent ? agentRunner(this.#agent, init.baseEnv) : execRunner(this.container);
    this.#runner = { run: (o) => this.#gate.run(() => runner.run(o)), stream: (o) => runner.stream(o) };
    this.#layout = new SandboxLayout({
      runner: this.#runner,
      sandboxUser: init.options.sandboxUser,
      timeoutMs: init.options.engineTimeoutMs,
    });
    this.fs = createContainerFs({
      container: this.container,
      runner: this.#runner,
      timeoutMs: init.options.engineTimeoutMs,
      mutated: () => this.#layout.markDirty(),
    });
    this.#host = {
      container: this.container,
      timeoutMs: init.options.engineTimeoutMs,
      log: init.log,
      lostReason: () => this.#lost,
      containerRunning: () => this.containerRunning(),
      finished: (proc, pidFile) => this.#processFinished(proc, pidFile),
    };
    if (this.#agent)
      this.#agent.owner = {
        lostReason: () => this.#lost ?? (this.#destroying ? 'session destroyed' : undefined),
        containerRunning: () => this.containerRunning(),
        movedTo: init.movedTo,
      };
  }

  get execPath(): 'agent' | 'exec' {
    return this.#agent ? 'agent' : 'exec';
  }

  get agentTransport(): 'socket' | 'exec-stream' | undefined {
    return this.#agent?.transport;
  }

  /** Why commands use one engine exec each (undefined on the agent path). */
  get execPathReason(): string | undefined {
    return this.#agent ? undefined : this.#init.agentUnavailable;
  }

  /** The session's exec agent, when it has one (recovery, hibernation). */
  get agent(): AgentChannel | undefined {
    return this.#agent;
  }

  /** Why the session is dead, if it is. */
  get lostReason(): string | undefined {
    return this.#lost;
  }

  get destroying(): boolean {
    return this.#destroying;
  }

  async spawn(request: SpawnRequest, sink: ProcessSink): Promise<BackendProcess> {
    if (this.#lost !== undefined) throw execError('EXEC_ERR_SESSION_DEAD', `session container is gone: ${this.#lost}`);
    if (this.#destroying) throw execError('EXEC_ERR_SESSION_DEAD', 'session is being destroyed');
    let user = '0:0';
    let sandboxType: SandboxType = 'none';
    if (request.sandbox.kind === 'restricted') {
      await this.#layout.prepareSandbox(request.sandbox);
      user = this.#init.options.sandboxUser;
      sandboxType = 'container-user';
    } else {
      // Root may create files in the writable roots that the sandbox user must own later.
      this.#layout.markDirty();
    }
    if (this.#agent) {
      const [uid, gid] = user.split(':').map(Number);
      // As on the exec path, where the engine lays an exec's Env over the image's (LANG, PATH).
      const env = { ...this.#init.baseEnv, ...request.env };
      return this.#agent.spawn({ ...request, env }, sink, { uid: uid ?? 0, gid: gid ?? uid ?? 0, sandboxType });
    }
    const env = { ...this.#init.baseEnv, ...request.env };
    await checkSpawn(this.#runner, request, user, env, this.#init.options.engineTimeoutMs);
    const proc = await spawnDockerProcess(this.#host, request, sink, { user, sandboxType });
    if (!proc.exited) this.#processes.add(proc);
    return proc;
  }

  /** Session creation: the default sandbox's layout is made before the first command needs it. */
  async prepareSandbox(sandbox: ResolvedSandbox): Promise<void> {
    if (sandbox.kind === 'restricted' && this.#lost === undefined && !this.#destroying)
      await this.#layout.prepareSandbox(sandbox);
  }

  /** Preview ports: a relay in the container, started through the engine (port-forward.ts). */
  connectPort(port: number): Promise<Duplex> {
    return connectContainerPort((request, sink) => this.spawn(request, sink), this.workdir, port);
  }

  /** Egress: the exec agent listens on 127.0.0.1:`port` and tunnels each client over its link. */
  async enableEgress(port: number, accept: (conn: Duplex, offersSocket?: boolean) => void): Promise<void> {
    if (this.#agent === undefined)
      throw execError(
        'EXEC_ERR_UNSUPPORTED',
        `session.network.allow needs the exec agent; this session runs one engine exec per command (${this.#init.agentUnavailable ?? 'no agent'})`,
      );
    await this.#agent.enableEgress(port, accept);
  }

  noteActivity(): void {
    if (this.#lost === undefined && !this.#destroying) this.#agent?.note();
  }

  async persistRecord(record: string): Promise<void> {
    const result = await this.#runner.run({
      cmd: ['/bin/sh', '-c', 'umask 077 && cat > "$1.tmp" && mv "$1.tmp" "$1"', 'sh', RECORD_FILE],
      stdin: Buffer.from(record),
      timeoutMs: this.#init.options.engineTimeoutMs,
    });
    if (result.exitCode !== 0)
      throw execError('EXEC_ERR_BACKEND', `cannot store the session record: ${String(result.stderr).trim()}`);
  }

  /** A symlink at `path` to the workspace (parents created, root-owned, world-traversable). */
  async aliasPath(path: string): Promise<boolean> {
    if (this.#lost !== undefined || this.#destroying) return false;
    const result = await this.#runner
      .run({
        cmd: ['/bin/sh', '-c', ALIAS_SCRIPT, 'sh', path, this.workdir],
        timeoutMs: this.#init.options.engineTimeoutMs,
      })
      .catch((err: unknown) => ({ exitCode: -1, stderr: (err as Error).message }));
    if (result.exitCode !== 0)
      this.#log.debug(
        { sessionId: this.id, path, stderr: String(result.stderr).trim() },
        'cannot link the client path to the workspace',
      );
    return result.exitCode === 0;
  }

  #processFinished(proc: DockerProcess, pidFile: string): void {
    this.#processes.delete(proc);
    this.#finishedPidFiles.push(pidFile);
    if (this.#finishedPidFiles.length >= CLEANUP_BATCH && this.#lost === undefined && !this.#destroying) {
      const files = this.#finishedPidFiles.splice(0);
      runControl(this.container, {
        cmd: ['/bin/sh', '-c', CLEANUP_SCRIPT, 'sh', ...files],
        timeoutMs: this.#init.options.engineTimeoutMs,
      }).catch((err: unknown) =>
        this.#log.debug({ err: (err as Error).message, sessionId: this.id }, 'pid file cleanup failed'),
      );
    }
  }

  /**
   * Server restart: the commands a previous server ran as engine execs are killed and handed to
   * `adopt` ended `lost` (exec-recovery.ts). Run on either path: the previous server may have had
   * no agent for this session where this one has.
   */
  recoverExecProcesses(
    adopt: (p: RecoveredProcess, process: BackendProcess) => ProcessSink | undefined,
  ): Promise<number> {
    return recoverExecCommands(
      {
        docker: this.#init.docker,
        container: this.container,
        timeoutMs: this.#init.options.engineTimeoutMs,
        log: this.#log,
      },
      adopt,
    );
  }

  /**
   * Ends every process of the container but its init, keep-alive loop and exec agent, those
   * that left their process group or session included (kill-all.ts; docs/docker-backend.md,
   * "Ending every process"). The session stays usable.
   */
  killAll(): Promise<void> {
    return this.#gate.exclusive(async () => {
      if (this.#lost !== undefined || this.#destroying) return;
      await killAllProcesses({
        container: this.container,
        agent: this.#agent !== undefined,
        timeoutMs: this.#init.options.engineTimeoutMs,
        log: this.#log,
        wanted: () => this.#lost === undefined && !this.#destroying,
      });
    });
  }

  /** Fresh container state: true running, false stopped or gone, undefined engine unreachable. */
  async containerRunning(): Promise<boolean | undefined> {
    try {
      const info = await withDeadline('container inspect', this.#init.options.engineTimeoutMs, (abortSignal) =>
        this.container.inspect({ abortSignal }),
      );
      // Paused containers report Running too: they are alive.
      return info.State.Running === true;
    } catch (err) {
      const status = statusOf((err as { cause?: unknown }).cause);
      if (status === 404) return false;
      return undefined;
    }
  }

  stats(): Promise<SessionStats> {
    return containerStats(this.container, this.#init.options.engineTimeoutMs);
  }

  snapshot(name: string | undefined, options?: SnapshotOptions): Promise<SnapshotInfo> {
    if (this.#lost !== undefined) throw execError('EXEC_ERR_SESSION_DEAD', `session container is gone: ${this.#lost}`);
    return commitSnapshot(this.container, { sessionId: this.id, tenant: this.tenant, name, memory: options?.memory });
  }

  onLost(listener: (reason: string) => void): void {
    if (this.#lost !== undefined) {
      queueMicrotask(() => listener(this.#lost!));
      return;
    }
    this.#lostListeners.push(listener);
  }

  /** The container died or vanished: every running process ends `lost`, listeners hear it. */
  markLost(reason: string): void {
    if (this.#lost !== undefined || this.#destroying) return;
    this.#lost = reason;
    this.#log.warn({ sessionId: this.id, containerId: this.containerId, reason }, 'session container lost');
    for (const p of this.#processes) p.lose(reason);
    this.#agent?.close(reason);
    for (const l of this.#lostListeners.splice(0)) {
      try {
        l(reason);
      } catch (err) {
        this.#log.error({ err: (err as Error).message }, 'onLost listener threw');
      }
    }
  }

  async destroy(): Promise<void> {
    if (this.#removing) return;
    this.#removing = true;
    // Never reset: once asked, the session is over for everyone, and a container the engine
    // removes after a failed try (past its deadline) is the teardown ending, not a loss.
    this.#destroying = true;
    for (const p of this.#processes) p.lose('session destroyed');
    this.#agent?.close('session destroyed');
    // Another replica owns it now: this one lets it go and leaves the container to it.
    const moved = await this.#init.movedTo?.().catch(() => undefined);
    if (moved === undefined) {
      try {
        await withDeadline('container remove', Math.max(this.#init.options.engineTimeoutMs, 15_000), (abortSignal) =>
          this.container.remove({ force: true, v: true, abortSignal }),
        );
      } catch (err) {
        // The session manager tries again (src/sessions/session-removal.ts); a 404 then is done.
        if (statusOf((err as { cause?: unknown }).cause) !== 404) {
          this.#removing = false;
          throw err;
        }
      }
    }
    closeExecStreams(this.container.id);
    this.#init.forget(this);
    // Before the delete answers: a claim made of a snapshot's image would keep it from deletion.
    if (moved === undefined) await this.#init.released?.().catch(() => undefined);
  }
}
