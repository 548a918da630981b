/**
 * One session of the local backend: a workspace directory on the host, a private /tmp, and
 * the commands started in them (relays, warm sandboxes). Everything a session's commands
 * start, in the foreground or not, ends with the session, and with the server.
 */
import { LocalEgress } from './local-egress.ts';
import { existsSync } from 'node:fs';
import { chown, mkdir, rm, stat } from 'node:fs/promises';
import { posix } from 'node:path';
import { execError } from '../../errors.ts';
import type { Logger } from '../../logger.ts';
import type { Duplex } from 'node:stream';
import type {
  BackendDisk,
  BackendProcess,
  BackendSession,
  BackendSessionSpec,
  EnvironmentFacts,
  ProcessSink,
  ResolvedSandbox,
  SandboxType,
  SessionFs,
  SessionStats,
  SpawnRequest,
} from '../types.ts';
import { bubblewrapArgs, hiddenByPrivateTmp, type BubblewrapProbe, type SandboxLayout } from './bubblewrap.ts';
import type { ClientDirectories } from './client-dirs.ts';
import { withinHostDirs } from './host-dirs.ts';
import { localDiskUse } from './disk-usage.ts';
import { spawnFailure } from '../spawn-failure.ts';
import { Keepers } from './keepers.ts';
import { localFs } from './local-fs.ts';
import { sandboxJoinPath } from './native-helpers.ts';
import type { OutputChannels } from './output-channels.ts';
import { spawnPipe } from './pipe-process.ts';
import { RelaySpawner } from './relay-spawner.ts';
import { connectLocalPort } from './port-forward.ts';
import { processTreeStats } from './process-stats.ts';
import { spawnPty } from './pty-process.ts';
import { removeSandboxAccounts } from './sandbox-accounts.ts';
import { sandboxedFs } from './sandboxed-fs.ts';
import { SandboxEnvironment } from './sandbox-env.ts';
import { hostFacts } from './host-facts.ts';
import { coldArgv, userArg, WarmSandboxes, type WarmSandboxTools } from './warm-sandbox.ts';
import { canonicalPath, type WorkspaceUser, type WorkspaceUsers } from './workspace-users.ts';
import { isWithin } from '../../path-within.ts';

/** What every session's spawns share. */
export interface SpawnSetup {
  readonly channels: OutputChannels | undefined;
  readonly ptyPinning: boolean;
  readonly probe: BubblewrapProbe;
  readonly warmTools: WarmSandboxTools | undefined;
  /**
   * Whether sandboxed commands may have network when their policy grants it. False for a
   * server without a token: a sandboxed command could otherwise connect to the server itself
   * and start unsandboxed commands.
   */
  readonly sandboxNetwork: boolean;
  readonly users: WorkspaceUsers;
  readonly log: Logger;
}

/** What the backend made for the session. */
export interface SessionPlaces {
  readonly workdir: string;
  /** The server created the workspace for this session (and removes it at the end). */
  readonly ownsWorkdir: boolean;
  readonly layout: SandboxLayout;
  readonly user: WorkspaceUser | undefined;
  /** The client's directories, shared with the layout (client-dirs.ts). */
  readonly clientDirs: ClientDirectories;
  /** Called once the session is destroyed. */
  readonly ended: () => void;
}

/** Runs `argv` with `arg0` shown as its name, where the spawner cannot set argv[0] itself. */
function withArg0(argv: readonly string[], arg0: string | undefined, shell: string): readonly string[] {
  if (arg0 === undefined || !shell.endsWith('bash')) return argv;
  return [shell, '-c', 'exec -a "$0" "$@"', arg0, ...argv];
}

const JOIN_HELPER = sandboxJoinPath();

/**
 * A cwd (or a client directory) under the host's /tmp where /tmp is writable is writable by the
 * policy's terms, but the session's private /tmp does not contain it: it becomes a writable root
 * of its own (lent to the sandbox user and bound from the host). Where /tmp is read-only,
 * bubblewrapArgs shows it read-only.
 */
function visibleCwd(sandbox: RestrictedSandbox, cwd: string, clientDirs: readonly string[]): RestrictedSandbox {
  const tmpWritable = sandbox.writableRoots.some((r) => posix.normalize(r) === '/tmp');
  if (!tmpWritable) return sandbox;
  const hidden = [...new Set([...clientDirs, posix.normalize(cwd)])].filter((d) =>
    hiddenByPrivateTmp(d, sandbox.writableRoots),
  );
  return hidden.length === 0 ? sandbox : { ...sandbox, writableRoots: [...sandbox.writableRoots, ...hidden] };
}

type RestrictedSandbox = Extract<ResolvedSandbox, { kind: 'restricted' }>;

/** Deny-read paths a session remembers where they first resolved; more (a client's narrowings) are resolved anew. */
const MAX_PINNED_DENIED = 1024;

/** A local session: its workspace, sandbox, keepers and processes on this host. */
export class LocalSession implements BackendSession {
  readonly id: BackendSessionSpec['id'];
  readonly tenant: BackendSessionSpec['tenant'];
  readonly workdir: string;
  readonly sandboxType: SandboxType;
  readonly sandboxUnavailableReason: string | undefined;
  readonly fs: SessionFs;
  readonly environment: EnvironmentFacts;
  /** Nothing on the host limits a directory's size: the server's disk watch does. */
  readonly disk: BackendDisk;
  readonly #spec: BackendSessionSpec;
  readonly #places: SessionPlaces;
  readonly #setup: SpawnSetup;
  readonly #warm: WarmSandboxes | undefined;
  readonly #keepers = new Keepers();
  /** Starts the relays of the session's commands, once the first one runs (relay-spawner.ts). */
  #spawner: Promise<RelaySpawner | undefined> | undefined;
  readonly #clientDirs: ClientDirectories;
  /** Something running as the server's user may have written into the workspace since it was last lent. */
  #dirty: boolean;
  #lending: Promise<void> | undefined;
  /** The environment as the sandbox user can use it (sandbox-env.ts). */
  readonly #sandboxEnv: SandboxEnvironment | undefined;
  #destroyed: Promise<void> | undefined;
  /** The session's egress proxy (local-egress.ts), once `enableEgress` made it. */
  #egress: LocalEgress | undefined;
  /** Each deny-read path as spelled, and where it resolved when first seen (the policy's: at creation). */
  readonly #pinnedDenied = new Map<string, Promise<string>>();

  constructor(spec: BackendSessionSpec, places: SessionPlaces, setup: SpawnSetup) {
    this.id = spec.id;
    this.tenant = spec.tenant;
    this.#spec = spec;
    this.workdir = places.workdir;
    this.#places = places;
    this.#setup = setup;
    this.sandboxType = setup.probe.available ? 'bubblewrap' : 'none';
    this.sandboxUnavailableReason = setup.probe.available ? undefined : setup.probe.reason;
    this.environment = hostFacts();
    this.#sandboxEnv = places.user ? new SandboxEnvironment(places.user) : undefined;
    this.#clientDirs = places.clientDirs;
    this.disk = { enforcement: 'watch', usage: () => localDiskUse([places.workdir, places.layout.privateTmp]) };
    this.#warm = setup.probe.available && setup.warmTools ? new WarmSandboxes(setup.warmTools, setup.log) : undefined;
    const sandboxed = spec.sandboxed !== false && setup.probe.available;
    // A sandboxed session's workspace is lent when it is made (local-backend.ts).
    this.#dirty = !sandboxed;
    this.fs = sandboxed
      ? sandboxedFs(localFs, {
          user: places.user,
          handOver: places.user?.lent === true,
          workdir: places.workdir,
          privateTmp: places.layout.privateTmp,
          clientDirs: places.clientDirs,
        })
      : localFs;
  }

  /** The client's working directories that are workspaces of this session too (client-dirs.ts). */
  get clientWorkspaces(): readonly string[] {
    return this.#clientDirs.workspaces;
  }

  clientDirectory(path: string, workspace: boolean): Promise<void> {
    return this.#clientDirs.add(path, workspace);
  }

  /** Pins the policy's deny-read paths where they resolve now, before the session runs a command. */
  async prepareSandbox(sandbox: ResolvedSandbox): Promise<void> {
    if (sandbox.kind === 'restricted') await this.#withPinnedDenied(sandbox);
  }

  /**
   * `sandbox` with each deny-read path also covered where it resolved when first seen. One spelled
   * through a link the sandbox user can remove (`link/key` for `real/key`) would otherwise cover
   * nothing once the link is gone, and the file would be readable under its real name.
   */
  async #withPinnedDenied(sandbox: RestrictedSandbox): Promise<RestrictedSandbox> {
    const canonical = await Promise.all(
      sandbox.denyRead.map((spelled) => {
        const pinned = this.#pinnedDenied.get(spelled);
        if (pinned) return pinned;
        const path = canonicalPath(spelled);
        if (this.#pinnedDenied.size < MAX_PINNED_DENIED) this.#pinnedDenied.set(spelled, path);
        return path;
      }),
    );
    return { ...sandbox, denyRead: [...new Set([...sandbox.denyRead, ...canonical])] };
  }

  async spawn(req: SpawnRequest, sink: ProcessSink): Promise<BackendProcess> {
    if (this.#destroyed) throw execError('EXEC_ERR_SESSION_DEAD', 'session is being destroyed');
    const cwd = await stat(req.cwd).catch(() => undefined);
    if (!cwd) throw spawnFailure(`cwd ${req.cwd}`, 'ENOENT', 'No such file or directory');
    if (!cwd.isDirectory()) throw spawnFailure(`cwd ${req.cwd}`, 'ENOTDIR', 'Not a directory');
    const shell = this.environment.shell.path;
    let env = req.env;
    let argv =
      req.arg0 !== undefined && (req.mode === 'pty' || req.sandbox.kind === 'restricted')
        ? withArg0(req.argv, req.arg0, shell)
        : req.argv;
    let sandboxType: SandboxType = 'none';
    if (req.sandbox.kind === 'restricted' && this.sandboxType === 'bubblewrap') {
      const pinned = await this.#withPinnedDenied(req.sandbox);
      const sandbox = visibleCwd(
        this.#setup.sandboxNetwork && !this.#egress ? pinned : { ...pinned, network: false },
        req.cwd,
        this.#clientDirs.all,
      );
      await this.#lend(sandbox.writableRoots);
      if (sandbox.denyRead.length > 0) await this.#places.layout.placeholders.ensure();
      const args = await bubblewrapArgs(sandbox, req.cwd, this.#places.layout);
      const user = userArg(this.#places.user, this.#spec.resources.pids);
      env = (await this.#sandboxEnv?.adjust(env)) ?? env;
      if (this.#egress) [argv, env] = [this.#egress.wrap(argv), this.#egress.environment(env)];
      const tools = { bwrap: this.#setup.probe.path, join: existsSync(JOIN_HELPER) ? JOIN_HELPER : undefined };
      argv = this.#warm ? await this.#warm.wrap(args, req.cwd, argv, user) : coldArgv(tools, args, req.cwd, argv, user);
      sandboxType = 'bubblewrap';
    } else {
      // It runs as the server's user and may leave files the sandbox user must own later.
      this.#dirty = true;
    }
    const [file, ...args] = argv;
    if (file === undefined) throw execError('EXEC_ERR_INVALID_PARAMS', 'argv must not be empty');
    const { channels, ptyPinning } = this.#setup;
    const common = {
      file,
      args,
      cwd: req.cwd,
      env,
      sandboxType,
      channels,
      keepers: this.#keepers,
      program: req.argv[0],
      // sandbox-join checks the program inside the sandbox, as the user, and says so first.
      reportExec: sandboxType === 'bubblewrap' && argv.includes(JOIN_HELPER),
    };
    // Sandboxed or not, PTY or pipes: the relay runs the same argv (build/sandbox-join into the
    // warm sandbox), only its parent differs.
    this.#spawner ??= RelaySpawner.start().catch(() => undefined);
    const spawner = await this.#spawner;
    if (req.mode === 'pty') return spawnPty({ ...common, spawner, size: req.size, pinning: ptyPinning }, sink);
    const argv0 = sandboxType === 'none' ? req.arg0 : undefined;
    return spawnPipe({ ...common, argv0, stdin: req.mode === 'pipe', spawner }, sink);
  }

  /**
   * The extra roots to lend, where they lead now, and only those still in the tenant's host
   * directories: one named inside them (a Codex working directory `dir/x/y`, a write entry of
   * a start's narrowing) can lead out through a symlink its commands made in a directory they
   * own (`x -> /opt/app`), and was lent where it led.
   */
  async #extraRoots(roots: readonly string[]): Promise<string[]> {
    const extra = new Set<string>();
    for (const root of roots) {
      if (root === '/tmp' || isWithin(root, this.workdir)) continue;
      const canonical = await canonicalPath(root);
      if (await withinHostDirs(canonical, this.#spec.hostDirs)) extra.add(canonical);
    }
    return [...extra];
  }

  /** Hands the workspace (and root-owned extra roots) to the sandbox user where needed. */
  async #lend(roots: readonly string[]): Promise<void> {
    const user = this.#places.user;
    if (!user?.lent) return;
    const extra = await this.#extraRoots(roots);
    // Serialized: concurrent starts wait for one pass instead of running their own.
    while (this.#lending) await this.#lending;
    const again = this.#dirty;
    this.#dirty = false;
    this.#lending = user.lend(extra, again).finally(() => (this.#lending = undefined));
    await this.#lending;
  }

  /**
   * The session's resource use: every process below its relays (the commands and what they
   * left in the background) and below its warm sandboxes, the relays and holders included.
   */
  async stats(): Promise<SessionStats> {
    return processTreeStats([...this.#keepers.pids(), ...((await this.#warm?.pids()) ?? [])]);
  }

  /**
   * Ends every process of the session: the running commands, what they left in the background
   * (also processes that left their process group or session), and the warm sandboxes' PID
   * namespaces. The session stays usable.
   */
  async killAll(): Promise<void> {
    await Promise.all([this.#keepers.killAll(), this.#warm?.killAll()]);
  }

  /** Preview ports: the host loopback, or the kept-warm sandbox's namespace (port-forward.ts). */
  connectPort(port: number, sandbox: ResolvedSandbox): Promise<Duplex> {
    const seen =
      sandbox.kind === 'restricted' && (!this.#setup.sandboxNetwork || this.#egress)
        ? { ...sandbox, network: false }
        : sandbox;
    return connectLocalPort(
      {
        spawn: (request, sink) => this.spawn(request, sink),
        workdir: this.workdir,
        bubblewrap: this.sandboxType === 'bubblewrap',
        warm: this.#warm !== undefined,
      },
      port,
      seen,
    );
  }

  /** Egress: sandboxed commands start through the wrapper that serves the proxy (local-egress.ts). */
  async enableEgress(port: number, accept: (conn: Duplex) => void): Promise<void> {
    if (this.sandboxType !== 'bubblewrap' || this.#spec.sandboxed === false)
      throw execError(
        'EXEC_ERR_UNSUPPORTED',
        'session.network.allow on the local backend needs sandboxed commands (bubblewrap, a sandbox other than danger-full-access)',
      );
    this.#egress ??= await LocalEgress.start(port, this.#places.layout.privateTmp, this.#places.user, accept);
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

  destroy(): Promise<void> {
    this.#destroyed ??= this.#destroy();
    return this.#destroyed;
  }

  async #destroy(): Promise<void> {
    const log = this.#setup.log;
    this.#egress?.close();
    await Promise.all([this.#keepers.killAll(), this.#warm?.close()]);
    await (await this.#spawner)?.close();
    await rm(this.#places.layout.privateTmp, { recursive: true, force: true }).catch((err: unknown) =>
      log.warn({ err }, 'could not remove the private /tmp'),
    );
    await removeSandboxAccounts(this.#places.layout.accounts).catch((err: unknown) =>
      log.warn({ err }, 'could not remove the sandbox account files'),
    );
    if (this.#places.ownsWorkdir) {
      await rm(this.workdir, { recursive: true, force: true }).catch((err: unknown) =>
        log.warn({ err, workdir: this.workdir }, 'could not remove workspace'),
      );
    }
    if (this.#places.user)
      await this.#setup.users
        .release(this.#places.user)
        .catch((err: unknown) => log.warn({ err }, 'could not give the workspace back'));
    this.#places.ended();
  }
}

/** Makes a session's private /tmp (mode 0700, the sandbox user's). */
export async function makePrivateTmp(path: string, user: { uid: number; gid: number } | undefined): Promise<void> {
  await mkdir(path, { recursive: true, mode: 0o700 });
  if (user) await chown(path, user.uid, user.gid);
}
