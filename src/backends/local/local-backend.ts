/**
 * The embedded default backend: sessions are workspace directories on the server host,
 * processes run through build/pty-relay (PTY) or child_process (pipes), sandboxed with bubblewrap.
 */
import { existsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { execError } from '../../errors.ts';
import type { TenantId } from '../../ids.ts';
import type { Logger } from '../../logger.ts';
import type { Duplex } from 'node:stream';
import type { Backend, BackendProcess, BackendSession, BackendSessionSpec, EnvironmentFacts, ProcessSink, ResolvedSandbox, SandboxType, SessionStats, SpawnRequest } from '../types.ts';
import { bubblewrapArgs, createDenyPlaceholders, probeBubblewrap, type BubblewrapProbe, type DenyPlaceholders } from './bubblewrap.ts';
import { localFs } from './local-fs.ts';
import { connectLocalPort } from './port-forward.ts';
import { OutputChannels } from './output-channels.ts';
import { spawnPipe } from './pipe-process.ts';
import { processTreeStats } from './process-stats.ts';
import { ptyRelayProblem, spawnPty } from './pty-process.ts';
import { probeWarmSandbox, WarmSandboxes, type WarmSandboxTools } from './warm-sandbox.ts';

export interface LocalBackendOptions {
  /** Directory holding one workspace per session. */
  readonly workspaceRoot: string;
  /** Probe result; probed at creation when omitted. Tests pass `{available:false}` to force `none`. */
  readonly bubblewrap?: BubblewrapProbe | undefined;
  /** Keep sandboxes warm where possible (warm-sandbox.ts); default true. Tests turn it off to cover the per-command path. */
  readonly warmSandboxes?: boolean | undefined;
  /** Whether a PTY command streaming fast is pinned to one CPU with its relay (default false: it changes the command's affinity). */
  readonly ptyPinning?: boolean | undefined;
}

/** What every session's spawns share: where output is read, and the PTY co-location switch. */
interface SpawnSetup {
  readonly channels: OutputChannels | undefined;
  readonly ptyPinning: boolean;
}

/** Variables of the server's own environment that a child must never inherit. */
function isServerSecret(name: string): boolean {
  return name.startsWith('EXEC_SERVER_') || name === 'CODEX_EXEC_SERVER_CONNECTION_TOKEN';
}

function hostEnvironment(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !isServerSecret(k)) env[k] = v;
  return env;
}

function hostFacts(): EnvironmentFacts {
  const shellPath = existsSync('/bin/bash') ? '/bin/bash' : '/bin/sh';
  return {
    shell: { name: shellPath.endsWith('bash') ? 'bash' : 'sh', path: shellPath },
    homeDir: homedir(),
    tempDir: tmpdir(),
    platform: process.platform,
    baseEnv: hostEnvironment(),
  };
}

/** Runs `argv` with `arg0` shown as its name, where the spawner cannot set argv[0] itself. */
function withArg0(argv: readonly string[], arg0: string | undefined, shell: string): readonly string[] {
  if (arg0 === undefined || !shell.endsWith('bash')) return argv;
  return [shell, '-c', 'exec -a "$0" "$@"', arg0, ...argv];
}

class LocalSession implements BackendSession {
  readonly id: BackendSessionSpec['id'];
  readonly workdir: string;
  readonly sandboxType: SandboxType;
  readonly sandboxUnavailableReason: string | undefined;
  readonly fs = localFs;
  readonly environment: EnvironmentFacts;
  readonly #placeholders: DenyPlaceholders;
  readonly #ownsWorkdir: boolean;
  readonly #log: Logger;
  readonly #bwrap: string;
  readonly #warm: WarmSandboxes | undefined;
  readonly #spawning: SpawnSetup;
  /** Pids of the commands still running (each leads its process group); `stats()` reads their trees. */
  readonly #running = new Set<number>();

  constructor(spec: BackendSessionSpec, workdir: string, ownsWorkdir: boolean, probe: BubblewrapProbe, placeholders: DenyPlaceholders, warmTools: WarmSandboxTools | undefined, spawning: SpawnSetup, log: Logger) {
    this.id = spec.id;
    this.workdir = workdir;
    this.#ownsWorkdir = ownsWorkdir;
    this.sandboxType = probe.available ? 'bubblewrap' : 'none';
    this.sandboxUnavailableReason = probe.available ? undefined : probe.reason;
    this.#placeholders = placeholders;
    this.environment = hostFacts();
    this.#log = log;
    this.#bwrap = probe.path;
    this.#warm = probe.available && warmTools ? new WarmSandboxes(warmTools, log) : undefined;
    this.#spawning = spawning;
  }

  async spawn(req: SpawnRequest, sink: ProcessSink): Promise<BackendProcess> {
    let argv = req.arg0 !== undefined && (req.mode === 'pty' || req.sandbox.kind === 'restricted') ? withArg0(req.argv, req.arg0, this.environment.shell.path) : req.argv;
    let sandboxType: SandboxType = 'none';
    if (req.sandbox.kind === 'restricted' && this.sandboxType === 'bubblewrap') {
      const args = await bubblewrapArgs(req.sandbox, req.cwd, this.#placeholders, req.mode === 'pty');
      argv = this.#warm ? await this.#warm.wrap(args, req.cwd, argv) : [this.#bwrap, ...args, '--', ...argv];
      sandboxType = 'bubblewrap';
    }
    const [file, ...args] = argv;
    if (file === undefined) throw execError('EXEC_ERR_INVALID_PARAMS', 'argv must not be empty');
    if (!existsSync(req.cwd)) throw execError('EXEC_ERR_INVALID_REQUEST', `cwd ${req.cwd} does not exist`);
    let pid: number | undefined;
    let ended = false;
    const tracked: ProcessSink = {
      output: sink.output.bind(sink),
      exit: (result) => {
        ended = true;
        if (pid !== undefined) this.#running.delete(pid);
        sink.exit(result);
      },
    };
    const proc =
      req.mode === 'pty'
        ? await spawnPty({ file, args, cwd: req.cwd, env: req.env, size: req.size, sandboxType, channels: this.#spawning.channels, pinning: this.#spawning.ptyPinning }, tracked)
        : await spawnPipe({ file, args, argv0: sandboxType === 'none' ? req.arg0 : undefined, cwd: req.cwd, env: req.env, stdin: req.mode === 'pipe', sandboxType, channels: this.#spawning.channels }, tracked);
    if (!ended && proc.pid !== undefined) this.#running.add((pid = proc.pid));
    return proc;
  }

  stats(): Promise<SessionStats> {
    return processTreeStats(this.#running);
  }

  /** Preview ports: the host loopback, or the kept-warm sandbox's namespace (port-forward.ts). */
  connectPort(port: number, sandbox: ResolvedSandbox): Promise<Duplex> {
    return connectLocalPort({ spawn: (request, sink) => this.spawn(request, sink), workdir: this.workdir, bubblewrap: this.sandboxType === 'bubblewrap', warm: this.#warm !== undefined }, port, sandbox);
  }

  async snapshot(): Promise<never> {
    throw execError('EXEC_ERR_UNSUPPORTED', 'snapshots need the docker backend');
  }

  async persistRecord(): Promise<void> {
    // Local sessions are never recovered (their processes die with the server).
  }

  onLost(): void {
    // A host directory cannot vanish under us the way a container can.
  }

  async destroy(): Promise<void> {
    this.#warm?.close();
    if (!this.#ownsWorkdir) return;
    await rm(this.workdir, { recursive: true, force: true }).catch((err: unknown) => this.#log.warn({ err, workdir: this.workdir }, 'could not remove workspace'));
  }
}

export async function createLocalBackend(options: LocalBackendOptions, log: Logger): Promise<Backend> {
  const probe = options.bubblewrap ?? (await probeBubblewrap());
  if (!probe.available) log.warn({ reason: probe.reason }, 'bubblewrap unavailable: local sessions run without a sandbox (sandbox type none)');
  const warmTools = probe.available && options.warmSandboxes !== false ? await probeWarmSandbox(probe.path, log) : undefined;
  const ptyProblem = ptyRelayProblem();
  if (ptyProblem) log.warn({ reason: ptyProblem }, 'PTY mode unavailable on the local backend');
  const placeholders = await createDenyPlaceholders();
  const channels = await OutputChannels.create().catch((err: unknown) => {
    log.warn({ err }, 'output channels unavailable: command output is read through plain pipes (more CPU per byte)');
    return undefined;
  });
  const spawning: SpawnSetup = { channels, ptyPinning: options.ptyPinning === true };
  await mkdir(options.workspaceRoot, { recursive: true });
  const sessions = new Set<LocalSession>();
  return {
    kind: 'local',
    async ping() {
      // The host is always there.
    },
    async createSession(spec) {
      if (spec.snapshot !== undefined) throw execError('EXEC_ERR_UNSUPPORTED', 'sessions from snapshots need the docker backend');
      const workdir = spec.workdir ?? join(options.workspaceRoot, spec.id);
      await mkdir(workdir, { recursive: true });
      const session = new LocalSession(spec, workdir, spec.workdir === undefined, probe, placeholders, warmTools, spawning, log);
      sessions.add(session);
      return session;
    },
    async recover() {
      return [];
    },
    async listSnapshots(_tenant: TenantId | undefined) {
      return [];
    },
    async deleteSnapshot() {
      throw execError('EXEC_ERR_NOT_FOUND', 'snapshots need the docker backend');
    },
    async close() {
      sessions.clear();
      await channels?.close();
    },
  };
}
