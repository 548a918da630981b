/**
 * The embedded default backend: sessions are workspace directories on the server host,
 * processes run through build/pty-relay (PTY) or child_process (pipes), sandboxed with bubblewrap.
 */
import { existsSync } from 'node:fs';
import { chmod, chown, mkdir, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, posix } from 'node:path';
import { execError } from '../../errors.ts';
import type { TenantId } from '../../ids.ts';
import type { Logger } from '../../logger.ts';
import type { Backend, BackendSessionSpec } from '../types.ts';
import { DenyPlaceholders, probeBubblewrap, type BubblewrapProbe } from './bubblewrap.ts';
import { ClientDirectories } from './client-dirs.ts';
import { checkHostDir } from './host-dirs.ts';
import { LocalSession, makePrivateTmp, type SpawnSetup } from './local-session.ts';
import { OutputChannels } from './output-channels.ts';
import { sweepOwnerless } from './placeholder-owners.ts';
import { ptyRelayProblem } from './pty-process.ts';
import { writeSandboxAccounts } from './sandbox-accounts.ts';
import { SandboxUsers } from './sandbox-users.ts';
import { probeWarmSandbox } from './warm-sandbox.ts';
import { isWithin } from '../../path-within.ts';
import { canonicalPath, overlaps, WorkspaceUsers } from './workspace-users.ts';

/** How the local backend runs: where workspaces live, the sandbox it probed, pinning and network. */
export interface LocalBackendOptions {
  /** Directory holding one workspace per session. */
  readonly workspaceRoot: string;
  /** Probe result; probed at creation when omitted. Tests pass `{available:false}` to force `none`. */
  readonly bubblewrap?: BubblewrapProbe | undefined;
  /** Keep sandboxes warm where possible (warm-sandbox.ts); default true. Tests turn it off to cover the per-command path. */
  readonly warmSandboxes?: boolean | undefined;
  /** Whether a PTY command streaming fast is pinned to one CPU with its relay (default false: it changes the command's affinity). */
  readonly ptyPinning?: boolean | undefined;
  /**
   * Whether sandboxed commands may get network where their policy grants it (default true).
   * A server without a token turns it off: with network, a sandboxed command could connect to
   * the server itself and start commands outside any sandbox.
   */
  readonly sandboxNetwork?: boolean | undefined;
  /** Where the deny-read placeholders live (default `/run/exec-server` as root, else `$XDG_RUNTIME_DIR` or the temp dir). */
  readonly stateDir?: string | undefined;
}

/** The login shell the sandbox user's account names. */
function sandboxShell(): string {
  return existsSync('/bin/bash') ? '/bin/bash' : '/bin/sh';
}

function defaultStateDir(): string {
  if (process.getuid?.() === 0) return '/run/exec-server';
  return join(process.env['XDG_RUNTIME_DIR'] ?? tmpdir(), `exec-server-${process.getuid?.() ?? 'user'}`);
}

/** The first ancestor of `dir` that others cannot search (the sandbox user could not reach a workspace below it). */
async function closedAncestor(dir: string): Promise<string | undefined> {
  for (let d = dirname(dir); ; d = dirname(d)) {
    const st = await stat(d).catch(() => undefined);
    if (st && (st.mode & 0o001) === 0) return d;
    if (d === dirname(d)) return undefined;
  }
}

/**
 * Makes the workspace root and the private /tmp directories' parent in it. One that cannot be
 * made (a read-only filesystem, no permission) is a configuration error naming the flag that
 * moves it, not a bare errno.
 */
async function makeWorkspaceRoot(root: string, tmpRoot: string): Promise<void> {
  try {
    // Traversable by the sandbox users (each workspace in it is closed to all but its own).
    await mkdir(root, { recursive: true, mode: 0o711 });
    const rootMode = (await stat(root)).mode & 0o7777;
    if (process.getuid?.() === 0 && (rootMode & 0o011) !== 0o011) await chmod(root, rootMode | 0o011);
    await mkdir(tmpRoot, { recursive: true, mode: 0o711 });
  } catch (err) {
    throw execError(
      'EXEC_ERR_CONFIG',
      `cannot make the workspace root ${root} (${(err as Error).message}); choose a writable directory with --workspace-root (EXEC_SERVER_WORKSPACE_ROOT)`,
      { cause: err },
    );
  }
}

/** What every local session of this server shares, made once at start. */
interface LocalHost {
  readonly options: LocalBackendOptions;
  readonly tmpRoot: string;
  readonly probe: BubblewrapProbe;
  readonly placeholders: DenyPlaceholders;
  readonly channels: OutputChannels | undefined;
  readonly users: WorkspaceUsers;
  readonly setup: SpawnSetup;
  readonly sessions: Set<LocalSession>;
}

/** The workspace root, the sandbox probes, the placeholders and channels; what is missing is said once. */
async function prepareHost(options: LocalBackendOptions, log: Logger): Promise<LocalHost> {
  // First: a root that cannot be made fails the start before anything is left open.
  const tmpRoot = join(options.workspaceRoot, '.tmp');
  await makeWorkspaceRoot(options.workspaceRoot, tmpRoot);
  const probe = options.bubblewrap ?? (await probeBubblewrap());
  if (!probe.available)
    log.warn(
      { reason: probe.reason },
      'bubblewrap unavailable: local sessions run without a sandbox (sandbox type none)',
    );
  const warmTools =
    probe.available && options.warmSandboxes !== false ? await probeWarmSandbox(probe.path, log) : undefined;
  const relayProblem = ptyRelayProblem();
  if (relayProblem)
    log.warn(
      { reason: relayProblem },
      'PTY mode unavailable on the local backend; pipe-mode commands run without a keeper (what they leave running can outlive the session and the server)',
    );
  const stateDir = options.stateDir ?? defaultStateDir();
  await sweepOwnerless(stateDir, log);
  const placeholders = await DenyPlaceholders.create(stateDir);
  const channels = await OutputChannels.create().catch((err: unknown) => {
    log.warn({ err }, 'output channels unavailable: command output is read through plain pipes (more CPU per byte)');
    return undefined;
  });
  const sandboxNetwork = options.sandboxNetwork !== false;
  if (!sandboxNetwork && probe.available)
    log.info({}, 'no token configured: sandboxed commands get no network, even where their policy grants it');
  const users = new WorkspaceUsers(probe.available ? await SandboxUsers.create() : undefined, options.workspaceRoot);
  const setup: SpawnSetup = {
    channels,
    ptyPinning: options.ptyPinning === true,
    probe,
    warmTools,
    sandboxNetwork,
    users,
    log,
  };
  const closed = await closedAncestor(options.workspaceRoot);
  if (closed && process.getuid?.() === 0 && probe.available)
    log.warn(
      { workspaceRoot: options.workspaceRoot, closed },
      'sandboxed commands run as users of their own, which cannot search this ancestor of the workspace root: choose a --workspace-root they can reach',
    );
  return { options, tmpRoot, probe, placeholders, channels, users, setup, sessions: new Set() };
}

/**
 * Refuses a client's workdir in the workspace root, or holding it: the session's user would be
 * handed every session's workspace and private /tmp, or another tenant's. The workspace of a live
 * session of the same tenant (or a directory in it) is allowed: a client may open several
 * sessions on one directory. Any other directory of a confined tenant must lie in its host
 * directories (host-dirs.ts).
 */
async function checkWorkdir(host: LocalHost, workdir: string, spec: BackendSessionSpec): Promise<void> {
  const { tenant, hostDirs } = spec;
  const root = host.options.workspaceRoot;
  if (!(await overlaps(workdir, root))) return checkHostDir(workdir, 'session.workdir', hostDirs);
  const [wanted, rootPath] = await Promise.all([canonicalPath(workdir), canonicalPath(root)]);
  for (const session of host.sessions) {
    if (session.tenant !== tenant) continue;
    const own = await canonicalPath(session.workdir);
    if (own !== rootPath && isWithin(own, rootPath) && isWithin(wanted, own)) return;
  }
  throw execError(
    'EXEC_ERR_INVALID_PARAMS',
    `session.workdir ${workdir}: the server keeps its sessions' workspaces in ${root}; choose a directory outside it`,
    { detail: { field: 'session.workdir' } },
  );
}

/** A session in its own workspace (made unless given), with its sandbox user and private /tmp. */
async function createLocalSession(
  host: LocalHost,
  spec: Parameters<Backend['createSession']>[0],
): Promise<LocalSession> {
  if (spec.snapshot !== undefined)
    throw execError('EXEC_ERR_UNSUPPORTED', 'sessions from snapshots need the docker backend');
  const ownsWorkdir = spec.workdir === undefined;
  if (spec.workdir !== undefined) await checkWorkdir(host, spec.workdir, spec);
  // A confined tenant's extra writable roots are host directories it names too (not /tmp: its own).
  for (const [i, root] of (spec.writableRoots ?? []).entries())
    if (posix.normalize(root) !== '/tmp')
      await checkHostDir(root, `session.sandbox.writableRoots[${i}]`, spec.hostDirs);
  const workdir = spec.workdir ?? join(host.options.workspaceRoot, spec.id);
  await mkdir(workdir, { recursive: true, mode: ownsWorkdir ? 0o700 : 0o755 });
  const user = await host.users.acquire(workdir, ownsWorkdir);
  try {
    if (ownsWorkdir && user) await chown(workdir, user.uid, user.gid);
    // File operations of a sandboxed session act as its sandbox user from the start.
    if (user && spec.sandboxed !== false && host.probe.available) await user.lend([], true);
    const privateTmp = join(host.tmpRoot, spec.id);
    await makePrivateTmp(privateTmp, user);
    const accounts =
      user && host.probe.available
        ? await writeSandboxAccounts(`${privateTmp}.accounts`, user, workdir, sandboxShell())
        : undefined;
    // Sessions' own directories are never a client's (another session's workspace would be lent).
    const clientDirs = new ClientDirectories([host.options.workspaceRoot, workdir], spec.hostDirs);
    const session: LocalSession = new LocalSession(
      spec,
      {
        workdir,
        ownsWorkdir,
        layout: {
          privateTmp,
          placeholders: host.placeholders,
          workdir,
          hostTerminals: user !== undefined,
          accounts,
          clientDirs,
        },
        user,
        clientDirs,
        ended: () => host.sessions.delete(session),
      },
      host.setup,
    );
    host.sessions.add(session);
    return session;
  } catch (err) {
    if (user) await host.users.release(user);
    throw err;
  }
}

/** The local backend: sessions as workspaces on this host, commands through the native relays. */
export async function createLocalBackend(options: LocalBackendOptions, log: Logger): Promise<Backend> {
  const host = await prepareHost(options, log);
  const { sessions, channels, placeholders } = host;
  return {
    kind: 'local',
    async ping() {
      // The host is always there.
    },
    createSession: (spec) => createLocalSession(host, spec),
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
      await Promise.all([...sessions].map((s) => s.destroy()));
      sessions.clear();
      await channels?.close();
      await placeholders
        .remove()
        .catch((err: unknown) => log.warn({ err }, 'could not remove the deny-read placeholders'));
    },
  };
}
