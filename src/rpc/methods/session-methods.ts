/** `initialize`, the `session/*` extensions and the environment queries. */
import { hostname } from 'node:os';
import { pathToFileURL } from 'node:url';
import { execError } from '../../errors.ts';
import type { EnvironmentInfo } from '../../protocol/index.ts';
import { toPath } from '../../protocol/index.ts';
import type { Session } from '../../sessions/session.ts';
import type { Connection } from '../connection.ts';
import type { MethodTable } from '../method-table.ts';

const uri = (path: string): string => pathToFileURL(path).href;

/**
 * What Codex reads from `initialize.environmentInfo` (and `environment/info`). Capabilities
 * advertise only what this server really implements; Codex skips calls for the others.
 */
export function environmentInfo(session: Session, version: string): EnvironmentInfo {
  const env = session.backend.environment;
  return {
    shell: env.shell,
    executorVersion: version,
    providerId: `exec-server:${session.backend.containerId ? 'docker' : 'local'}`,
    cwd: uri(session.backend.workdir),
    userHomeDir: uri(env.homeDir),
    platformOs: env.platform,
    prependPathDirs: [],
    temporaryDirectories: [],
    tempDir: uri(env.tempDir),
    capabilities: {
      networkProxyLaunch: false,
      networkProxyReviewDomains: false,
      networkProxyTransparentTcp: false,
      credentialMasking: false,
      credentialMaskingCustomProviders: false,
      capabilityDiscoverySandbox: false,
      fsWatchMissing: true,
      capabilityDiscoveryV2: false,
      environmentConfigRead: true,
      httpHeaderEnvVars: false,
      sandboxedFileStreaming: false,
      fileWriteStreaming: false,
      shellSnapshotV2: false,
      windowsMxc: false,
      linuxRootWritePreservesDevices: false,
      linuxApprovedRootWritePreservesRestrictions: false,
    },
  };
}

/** Our extensions, advertised in `initialize.capabilities`. */
function serverCapabilities(session: Session): Record<string, boolean> {
  return {
    processResize: true,
    processCloseStdin: true,
    processList: true,
    processEscalated: true,
    approvals: true,
    snapshots: session.backend.containerId !== undefined,
    hibernation:
      session.backend.hibernation !== undefined && session.backend.hibernation.unsupportedReason === undefined,
    chunkedFiles: true,
    binaryOutput: true,
  };
}

/** Registers `initialize`, the environment queries and the `session/*` methods on the table. */
export function registerSessionMethods(table: MethodTable<Connection>): void {
  initializeMethods(table);
  sessionMethods(table);
}

/** `initialize` and the environment queries. */
function initializeMethods(table: MethodTable<Connection>) {
  table.add(
    'initialize',
    async (params, conn) => {
      if (params.observe === true && !params.resumeSessionId)
        throw execError(
          'EXEC_ERR_INVALID_PARAMS',
          'observe needs resumeSessionId: an observer follows an existing session',
          { detail: { field: 'observe' } },
        );
      const scope = conn.deps.principal?.scope;
      if (scope !== undefined && params.resumeSessionId !== scope.sessionId)
        throw execError(
          'EXEC_ERR_TOKEN_SCOPE',
          `this token opens only session ${scope.sessionId}: initialize with resumeSessionId ${scope.sessionId}`,
        );
      conn.beginInitialize();
      conn.clientName = params.clientName;
      try {
        const { sessions, tenant } = conn.deps;
        let session: Session;
        if (params.resumeSessionId) {
          session = sessions.get(params.resumeSessionId, tenant);
        } else {
          session = await sessions.create(params.session ?? {}, {
            tenant,
            clientName: params.clientName,
            onImagePull: (pull) => conn.notifyInitializing('session/imagePull', pull),
          });
        }
        // A read token watches: it never takes the client's place nor answers its approvals.
        conn.attach(session, params.observe === true || scope?.access === 'read' ? 'observer' : 'client');
        return {
          sessionId: session.id,
          capabilities: serverCapabilities(session),
          environmentInfo: environmentInfo(session, conn.deps.version),
        };
      } catch (err) {
        conn.resetInitialize();
        throw err;
      }
    },
    'none',
  );
  table.add('environment/info', (_p, conn) => environmentInfo(conn.session, conn.deps.version));
}

/** The environment configuration and the `session/*` methods. */
function sessionMethods(table: MethodTable<Connection>) {
  table.add('environmentConfig/read', async (p, conn) => {
    // Codex names its working directory here before its first command: map it now (docker:
    // a workspace alias; local: a workspace of the session at its own path), so the fs calls
    // and commands that follow already see the workspace there.
    // A read token only reads: lending a directory to the session (local: chowned to its
    // sandbox user) is a change it may not make.
    if (p.cwd && conn.principalAccess !== 'read') {
      try {
        const cwd = toPath(p.cwd);
        if (cwd.startsWith('/')) {
          await conn.session.backend.clientDirectory?.(cwd, true);
          await conn.session.resolveCwd(cwd);
        }
      } catch {
        // Best effort: a bad or unmappable cwd only means no alias yet.
      }
    }
    // The server keeps no Codex configuration layers of its own; report empty ones.
    const home = conn.session.backend.environment.homeDir;
    return {
      userHomeDir: uri(home),
      codexHomeDir: uri(`${home.replace(/\/$/, '')}/.codex`),
      hostname: hostname(),
      config: { layers: [], cloudInsertionIndex: 0 },
      requirements: { layers: [], cloudInsertionIndex: 0 },
    };
  });
  table.add('session/info', async (_p, conn) => ({ ...conn.session.info(), usage: await conn.session.usage.sample() }));
  table.add('session/terminateAll', async (_p, conn) => ({ terminated: await conn.session.terminateAll() }));
  table.add('session/hibernate', (_p, conn) => conn.session.hibernate());
  table.add('session/wake', (_p, conn) => conn.session.wake());
  table.add('session/snapshot', (params, conn) =>
    conn.session.snapshot(params.name ?? undefined, params.memory === true),
  );
  table.add('session/fork', async (params, conn) => {
    if (conn.deps.principal?.scope !== undefined)
      throw execError(
        'EXEC_ERR_TOKEN_SCOPE',
        'session tokens cannot fork (a fork creates sessions); use a tenant token',
      );
    const forked = await conn.deps.sessions.fork(conn.session, {
      count: params.count ?? 1,
      memory: params.memory === true,
      name: params.name ?? undefined,
    });
    return { snapshot: forked.snapshot, sessions: forked.sessions.map((s) => s.info()) };
  });
}
