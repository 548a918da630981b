/**
 * Server configuration: one table of options, each settable by flag and by `EXEC_SERVER_*`
 * variable (flag wins), validated at boot. The same table prints `--help` and backs the
 * configuration table of docs/guide.md, so they cannot drift apart.
 */
import { parseArgs } from 'node:util';
import { availableParallelism, homedir, tmpdir } from 'node:os';
import { accessSync, constants as fsConstants } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';

type Kind = 'string' | 'int' | 'bool' | 'enum';

interface OptionDef {
  readonly flag: string;
  readonly env: string;
  readonly kind: Kind;
  readonly default: string | number | boolean | undefined;
  readonly description: string;
  readonly values?: readonly string[];
  readonly min?: number;
  readonly max?: number;
  readonly secret?: boolean;
}

/** Every option the server understands. Order is the order of `--help` and of docs/guide.md's table. */
/** Half the CPUs this host has, at least one: a session's default limit stays below the host's. */
function defaultSessionCpus(): number {
  return Math.max(1, Math.floor(availableParallelism() / 2));
}

/** Whether `dir` could be made: its nearest existing ancestor is a directory we may write. */
function canMake(dir: string): boolean {
  for (let d = dir; ; d = dirname(d)) {
    try {
      accessSync(d, fsConstants.W_OK);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || d === dirname(d)) return false;
    }
  }
}

/**
 * Local workspaces live outside every default writable root of a sandbox (the workspace, /tmp):
 * under /tmp, one session's commands could write into another's workspace. Where the home
 * directory cannot be written (an image on a read-only root filesystem, where only /tmp is
 * writable), a directory of this user's under the temp dir: sandboxed commands see a private
 * /tmp there, and the server's own directory is closed to others.
 */
function defaultWorkspaceRoot(): string {
  if (process.getuid?.() === 0) return '/var/lib/exec-server/workspaces';
  const state = join(process.env['XDG_STATE_HOME'] ?? join(homedir(), '.local', 'state'), 'exec-server', 'workspaces');
  return canMake(state) ? state : join(tmpdir(), `exec-server-${process.getuid?.() ?? 'user'}`, 'workspaces');
}

/**
 * Longest `--docker-agent-socket-dir`: the agent's socket sits two short directories below it
 * (the instance's, the container's) and its lock file beside it, within `sun_path`'s 108 bytes.
 */
const MAX_SOCKET_DIR_LENGTH = 60;

/** Per uid, so that servers of different users never share (or fight over) one directory. */
function defaultAgentSocketDir(): string {
  return join(tmpdir(), `exec-server-agents-${process.getuid?.() ?? 0}`);
}

export const OPTIONS = {
  listen: {
    flag: 'listen',
    env: 'EXEC_SERVER_LISTEN',
    kind: 'string',
    default: 'ws://127.0.0.1:8765',
    description: 'Address to serve WebSocket and HTTP on, `ws://HOST:PORT` (port 0 = any free port).',
  },
  backend: {
    flag: 'backend',
    env: 'EXEC_SERVER_BACKEND',
    kind: 'enum',
    values: ['local', 'docker', 'auto'],
    default: 'local',
    description:
      'Where sessions run: `local` (workspace dirs on this host), `docker` (a container per session), `auto` (docker when an engine answers, else local).',
  },
  token: {
    flag: 'token',
    env: 'EXEC_SERVER_TOKEN',
    kind: 'string',
    default: undefined,
    secret: true,
    description:
      'Bearer token required on every route but /healthz and /readyz (also read from `CODEX_EXEC_SERVER_CONNECTION_TOKEN`).',
  },
  tokens: {
    flag: 'tokens',
    env: 'EXEC_SERVER_TOKENS',
    kind: 'string',
    default: undefined,
    secret: true,
    description: 'Several tenants: `alice:TOKEN1,bob:TOKEN2`.',
  },
  tokensFile: {
    flag: 'tokens-file',
    env: 'EXEC_SERVER_TOKENS_FILE',
    kind: 'string',
    default: undefined,
    description: 'File with one `tenant:token` per line (`#` comments allowed).',
  },
  allowedOrigins: {
    flag: 'allowed-origins',
    env: 'EXEC_SERVER_ALLOWED_ORIGINS',
    kind: 'string',
    default: undefined,
    description:
      "Comma-separated browser origins (`https://app.example.com`) that may call the API, its WebSockets and `/mcp` besides the server's own (the console); a request with another `Origin` is refused with 403 (a preview application's own HTTP requests excepted), one without (non-browser clients) passes.",
  },
  insecureNoAuth: {
    flag: 'insecure-no-auth',
    env: 'EXEC_SERVER_INSECURE_NO_AUTH',
    kind: 'bool',
    default: false,
    description: 'Allow binding a non-loopback address without a token.',
  },
  image: {
    flag: 'image',
    env: 'EXEC_SERVER_IMAGE',
    kind: 'string',
    default: 'exec-server-session:latest',
    description: 'Default session image (docker backend).',
  },
  dockerHost: {
    flag: 'docker-host',
    env: 'EXEC_SERVER_DOCKER_HOST',
    kind: 'string',
    default: undefined,
    description:
      'Docker engine address (`unix:///path` or `tcp://host:port`), or several separated by commas (a pool: new sessions go to the healthy engine with the fewest); falls back to `DOCKER_HOST`, then the default socket.',
  },
  workspaceRoot: {
    flag: 'workspace-root',
    env: 'EXEC_SERVER_WORKSPACE_ROOT',
    kind: 'string',
    default: defaultWorkspaceRoot(),
    description:
      'Local backend: directory holding one workspace directory per session (outside /tmp, which sandboxed commands see as a private /tmp of their session).',
  },
  ptyPin: {
    flag: 'pty-pin',
    env: 'EXEC_SERVER_PTY_PIN',
    kind: 'bool',
    default: false,
    description:
      "Local backend: pin a PTY command streaming fast to one CPU with its relay while it streams (faster terminals on VMs; changes the command's CPU affinity, so off unless turned on; see docs/architecture.md).",
  },
  logLevel: {
    flag: 'log-level',
    env: 'EXEC_SERVER_LOG_LEVEL',
    kind: 'enum',
    values: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
    default: 'info',
    description:
      'Log level: `info` logs lifecycle events (sessions created and reaped, processes lost, policy decisions), `debug` adds one line per request.',
  },
  logFormat: {
    flag: 'log-format',
    env: 'EXEC_SERVER_LOG_FORMAT',
    kind: 'enum',
    values: ['auto', 'json', 'pretty'],
    default: 'auto',
    description:
      'Log lines on stderr: `json` (pino), `pretty` (one readable line each), `auto` (pretty when stderr is a terminal, else json).',
  },
  maxSessions: {
    flag: 'max-sessions',
    env: 'EXEC_SERVER_MAX_SESSIONS',
    kind: 'int',
    default: 256,
    min: 1,
    max: 100_000,
    description: 'Sessions per server.',
  },
  maxSessionsPerTenant: {
    flag: 'max-sessions-per-tenant',
    env: 'EXEC_SERVER_MAX_SESSIONS_PER_TENANT',
    kind: 'int',
    default: 64,
    min: 1,
    max: 100_000,
    description: 'Sessions per tenant (token); past it creation answers 429.',
  },
  maxProcesses: {
    flag: 'max-processes',
    env: 'EXEC_SERVER_MAX_PROCESSES',
    kind: 'int',
    default: 64,
    min: 1,
    max: 4096,
    description:
      'Processes per session, running and retained; past it the least recently used is pruned (8 most recent protected).',
  },
  outputRetentionBytes: {
    flag: 'output-retention-bytes',
    env: 'EXEC_SERVER_OUTPUT_RETENTION_BYTES',
    kind: 'int',
    default: 1024 * 1024,
    min: 4096,
    max: 1024 ** 3,
    description: 'Output kept per process for `process/read` (oldest dropped first).',
  },
  exitedRetentionMs: {
    flag: 'exited-retention-ms',
    env: 'EXEC_SERVER_EXITED_RETENTION_MS',
    kind: 'int',
    default: 600_000,
    min: 0,
    max: 7 * 86_400_000,
    description: 'How long an ended process stays readable.',
  },
  terminateGraceMs: {
    flag: 'terminate-grace-ms',
    env: 'EXEC_SERVER_TERMINATE_GRACE_MS',
    kind: 'int',
    default: 2000,
    min: 0,
    max: 600_000,
    description: 'Delay between SIGTERM and SIGKILL on terminate.',
  },
  approvalTimeoutMs: {
    flag: 'approval-timeout-ms',
    env: 'EXEC_SERVER_APPROVAL_TIMEOUT_MS',
    kind: 'int',
    default: 120_000,
    min: 100,
    max: 86_400_000,
    description: 'An approval request unanswered this long counts as denied.',
  },
  maxPendingApprovals: {
    flag: 'max-pending-approvals',
    env: 'EXEC_SERVER_MAX_PENDING_APPROVALS',
    kind: 'int',
    default: 32,
    min: 1,
    max: 10_000,
    description: 'Pending approval requests per session.',
  },
  maxMessageBytes: {
    flag: 'max-message-bytes',
    env: 'EXEC_SERVER_MAX_MESSAGE_BYTES',
    kind: 'int',
    default: 32 * 1024 * 1024,
    min: 1024,
    max: 1024 ** 3,
    description: 'Largest WebSocket message accepted; a bigger one closes the connection with code 1009.',
  },
  wsBufferLimitBytes: {
    flag: 'ws-buffer-limit-bytes',
    env: 'EXEC_SERVER_WS_BUFFER_LIMIT_BYTES',
    kind: 'int',
    default: 16 * 1024 * 1024,
    min: 64 * 1024,
    max: 1024 ** 3,
    description:
      'Bytes buffered for one slow WebSocket client before it is told and disconnected (its processes keep running).',
  },
  wsStallTimeoutMs: {
    flag: 'ws-stall-timeout-ms',
    env: 'EXEC_SERVER_WS_STALL_TIMEOUT_MS',
    kind: 'int',
    default: 10_000,
    min: 100,
    max: 3_600_000,
    description:
      "While a client is behind (a quarter of the buffer limit unread) its session's commands wait for it; if it stays behind this long it is disconnected as a slow consumer and output is drained again.",
  },
  fsMaxReadBytes: {
    flag: 'fs-max-read-bytes',
    env: 'EXEC_SERVER_FS_MAX_READ_BYTES',
    kind: 'int',
    default: 64 * 1024 * 1024,
    min: 1024,
    max: 1024 ** 3,
    description: 'Largest `fs/readFile` answer; bigger files need chunked reads.',
  },
  idleTimeoutSeconds: {
    flag: 'idle-timeout-seconds',
    env: 'EXEC_SERVER_IDLE_TIMEOUT_SECONDS',
    kind: 'int',
    default: 3600,
    min: 1,
    max: 30 * 86_400,
    description: 'Default idle time (no client attached, no running process) before a session is reaped.',
  },
  maxLifetimeSeconds: {
    flag: 'max-lifetime-seconds',
    env: 'EXEC_SERVER_MAX_LIFETIME_SECONDS',
    kind: 'int',
    default: 86_400,
    min: 1,
    max: 365 * 86_400,
    description: 'Default and maximum session lifetime.',
  },
  sandbox: {
    flag: 'sandbox',
    env: 'EXEC_SERVER_SANDBOX',
    kind: 'enum',
    values: ['workspace-write', 'read-only', 'danger-full-access'],
    default: 'workspace-write',
    description: 'Default sandbox policy of new sessions.',
  },
  allowedSandboxTypes: {
    flag: 'allowed-sandbox-types',
    env: 'EXEC_SERVER_ALLOWED_SANDBOX_TYPES',
    kind: 'string',
    default: undefined,
    description:
      'Sandbox types sessions may ask for, comma-separated: `TYPE` for every tenant, `TENANT:TYPE` for one more (`read-only,workspace-write,ops:danger-full-access`); anything else is refused with 403 `EXEC_ERR_SANDBOX_TYPE_FORBIDDEN`, and so is running a command outside the sandbox (escalation) where `danger-full-access` is not allowed. Default: every type.',
  },
  approvalPolicy: {
    flag: 'approval-policy',
    env: 'EXEC_SERVER_APPROVAL_POLICY',
    kind: 'enum',
    values: ['untrusted', 'on-failure', 'on-request', 'never'],
    default: 'on-request',
    description: 'Default approval policy of new sessions.',
  },
  denialHandling: {
    flag: 'denial-handling',
    env: 'EXEC_SERVER_DENIAL_HANDLING',
    kind: 'enum',
    values: ['auto', 'server', 'report'],
    default: 'auto',
    description:
      'Who decides on a sandbox denial: `server` (the gate may retry unsandboxed), `report` (always report `sandboxDenied`, the client decides), `auto` (report for Codex clients, server otherwise).',
  },
  memoryMb: {
    flag: 'memory-mb',
    env: 'EXEC_SERVER_MEMORY_MB',
    kind: 'int',
    default: 2048,
    min: 16,
    max: 1024 * 1024,
    description: 'Default container memory limit (docker).',
  },
  maxMemoryMb: {
    flag: 'max-memory-mb',
    env: 'EXEC_SERVER_MAX_MEMORY_MB',
    kind: 'int',
    default: 8192,
    min: 16,
    max: 1024 * 1024,
    description: 'Largest memory limit a session may ask for.',
  },
  cpus: {
    flag: 'cpus',
    env: 'EXEC_SERVER_CPUS',
    kind: 'int',
    default: defaultSessionCpus(),
    min: 1,
    max: 1024,
    description:
      "Default container CPU limit (docker); default half the host's CPUs, at least 1, so that one busy session leaves CPU to the others.",
  },
  maxCpus: {
    flag: 'max-cpus',
    env: 'EXEC_SERVER_MAX_CPUS',
    kind: 'int',
    default: 4,
    min: 1,
    max: 1024,
    description: 'Largest CPU limit a session may ask for.',
  },
  pids: {
    flag: 'pids',
    env: 'EXEC_SERVER_PIDS',
    kind: 'int',
    default: 512,
    min: 8,
    max: 1_000_000,
    description: 'Default container pids limit.',
  },
  maxPids: {
    flag: 'max-pids',
    env: 'EXEC_SERVER_MAX_PIDS',
    kind: 'int',
    default: 4096,
    min: 8,
    max: 1_000_000,
    description: 'Largest pids limit a session may ask for.',
  },
  diskMb: {
    flag: 'disk-mb',
    env: 'EXEC_SERVER_DISK_MB',
    kind: 'int',
    default: 10_240,
    min: 16,
    max: 64 * 1024 * 1024,
    description:
      "Default disk limit of a session, in MiB: its container's writable layer (docker; by the engine where it can, overlay2 on xfs with project quotas, else by the disk watch), its workspace and private /tmp (local, by the disk watch).",
  },
  maxDiskMb: {
    flag: 'max-disk-mb',
    env: 'EXEC_SERVER_MAX_DISK_MB',
    kind: 'int',
    default: 102_400,
    min: 16,
    max: 64 * 1024 * 1024,
    description: 'Largest disk limit a session may ask for.',
  },
  diskWatchSeconds: {
    flag: 'disk-watch-seconds',
    env: 'EXEC_SERVER_DISK_WATCH_SECONDS',
    kind: 'int',
    default: 30,
    min: 1,
    max: 3600,
    description:
      "Where the engine does not enforce the disk limit: how often a session's disk use is measured; past its limit its processes are ended and new ones refused until files are removed.",
  },
  dockerExecPath: {
    flag: 'docker-exec-path',
    env: 'EXEC_SERVER_DOCKER_EXEC_PATH',
    kind: 'enum',
    values: ['agent', 'exec'],
    default: 'agent',
    description:
      'How commands reach a docker session: `agent` (the exec agent inside the container; a session where it cannot start falls back to `exec`) or `exec` (one engine exec per command).',
  },
  dockerAgentSocketDir: {
    flag: 'docker-agent-socket-dir',
    env: 'EXEC_SERVER_DOCKER_AGENT_SOCKET_DIR',
    kind: 'string',
    default: defaultAgentSocketDir(),
    description:
      "Docker: a directory the engine's host shares with the server at the same path (the same machine, or a volume both mount), where the server listens for each session's exec agent (a directory mounted read-only into its container; the agent connects out) so that output reaches the server directly instead of through the engine; found out per engine, with the engine's path as the fallback. `off`: always through the engine. An absolute path of at most 60 characters.",
  },
  warmPool: {
    flag: 'warm-pool',
    env: 'EXEC_SERVER_WARM_POOL',
    kind: 'int',
    default: 0,
    min: 0,
    max: 256,
    description: 'Started containers of the default image kept ready (docker).',
  },
  runtime: {
    flag: 'runtime',
    env: 'EXEC_SERVER_RUNTIME',
    kind: 'string',
    default: undefined,
    description:
      "OCI runtime of session containers (docker), e.g. `runsc` for gVisor; default: the engine's default runtime. Checked against the engine at startup.",
  },
  allowedRuntimes: {
    flag: 'allowed-runtimes',
    env: 'EXEC_SERVER_ALLOWED_RUNTIMES',
    kind: 'string',
    default: undefined,
    description: 'Comma-separated runtimes a session may ask for (`session.runtime`), besides the default one.',
  },
  warmPoolRuntimes: {
    flag: 'warm-pool-runtimes',
    env: 'EXEC_SERVER_WARM_POOL_RUNTIMES',
    kind: 'string',
    default: undefined,
    description: "Warm pools of other runtimes: `runsc=2,runc=1` (`--warm-pool` is the default runtime's).",
  },
  idleHibernateSeconds: {
    flag: 'idle-hibernate-seconds',
    env: 'EXEC_SERVER_IDLE_HIBERNATE_SECONDS',
    kind: 'int',
    default: 0,
    min: 0,
    max: 30 * 86_400,
    description:
      'Docker sessions whose runtime can checkpoint (gVisor) hibernate after this long idle instead of being reaped; 0 = never.',
  },
  instanceId: {
    flag: 'instance-id',
    env: 'EXEC_SERVER_INSTANCE_ID',
    kind: 'string',
    default: 'default',
    description:
      'Names this server in container labels; a restarted server with the same id re-adopts its sessions. One live server per id and engine: a second one waits for the first to stop, then fails.',
  },
  previewHost: {
    flag: 'preview-host',
    env: 'EXEC_SERVER_PREVIEW_HOST',
    kind: 'string',
    default: undefined,
    description:
      'Wildcard host of preview ports: `p{port}-{session}.HOST` is proxied like `/v1/sessions/{session}/ports/{port}/` (DNS `*.HOST` pointing at this server).',
  },
  previewSecret: {
    flag: 'preview-secret',
    env: 'EXEC_SERVER_PREVIEW_SECRET',
    kind: 'string',
    default: undefined,
    secret: true,
    description:
      'Key that signs preview URLs (same value on every replica); default a random key per process (its signed URLs end with it).',
  },
  previewMaxPorts: {
    flag: 'preview-max-ports',
    env: 'EXEC_SERVER_PREVIEW_MAX_PORTS',
    kind: 'int',
    default: 16,
    min: 1,
    max: 1024,
    description: 'Preview ports one session exposes at most.',
  },
  previewMaxConnections: {
    flag: 'preview-max-connections',
    env: 'EXEC_SERVER_PREVIEW_MAX_CONNECTIONS',
    kind: 'int',
    default: 64,
    min: 1,
    max: 4096,
    description: 'Proxied preview connections in flight per session (each is a relay in the session).',
  },
  previewUrlTtlSeconds: {
    flag: 'preview-url-ttl-seconds',
    env: 'EXEC_SERVER_PREVIEW_URL_TTL_SECONDS',
    kind: 'int',
    default: 3600,
    min: 10,
    max: 7 * 86_400,
    description: 'Default validity of a signed preview URL.',
  },
  shutdownGraceMs: {
    flag: 'shutdown-grace-ms',
    env: 'EXEC_SERVER_SHUTDOWN_GRACE_MS',
    kind: 'int',
    default: 10_000,
    min: 0,
    max: 600_000,
    description: 'Time allowed for a graceful shutdown on SIGTERM.',
  },
  sessionTokenSecret: {
    flag: 'session-token-secret',
    env: 'EXEC_SERVER_SESSION_TOKEN_SECRET',
    kind: 'string',
    default: undefined,
    secret: true,
    description:
      'Key that signs tokens scoped to one session (same value on every replica); default derived from the tenant tokens, else random per process.',
  },
  sessionTokenMaxTtlSeconds: {
    flag: 'session-token-max-ttl-seconds',
    env: 'EXEC_SERVER_SESSION_TOKEN_MAX_TTL_SECONDS',
    kind: 'int',
    default: 86_400,
    min: 60,
    max: 30 * 86_400,
    description:
      'Longest validity of a session token (`POST /v1/sessions/{id}/tokens` `ttlSeconds`; without one a token lasts 1 hour, or this if shorter).',
  },
  auditLog: {
    flag: 'audit-log',
    env: 'EXEC_SERVER_AUDIT_LOG',
    kind: 'string',
    default: undefined,
    description:
      'Append a hash-chained JSON audit log here (`-` for standard output); check it with `exec-server audit verify PATH`.',
  },
  auditQueueLines: {
    flag: 'audit-queue-lines',
    env: 'EXEC_SERVER_AUDIT_QUEUE_LINES',
    kind: 'int',
    default: 10_000,
    min: 16,
    max: 1_000_000,
    description: 'Audit lines waiting to be written at most; past it lines are counted as dropped and readiness fails.',
  },
} as const satisfies Record<string, OptionDef>;

type Options = typeof OPTIONS;
type ValueOf<D> = D extends { kind: 'int' }
  ? number
  : D extends { kind: 'bool' }
    ? boolean
    : D extends { kind: 'enum'; values: readonly (infer V)[] }
      ? V
      : string;
type WithDefault<D> = D extends { default: undefined } ? ValueOf<D> | undefined : ValueOf<D>;

/** The validated configuration. */
export type Config = { -readonly [K in keyof Options]: WithDefault<Options[K]> };

/** A configuration error: the message names the option and what was wrong. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

function coerce(name: string, def: OptionDef, raw: string | boolean): string | number | boolean {
  const where = `--${def.flag} / ${def.env}`;
  switch (def.kind) {
    case 'bool': {
      if (typeof raw === 'boolean') return raw;
      if (/^(1|true|yes|on)$/i.test(raw)) return true;
      if (/^(0|false|no|off|)$/i.test(raw)) return false;
      throw new ConfigError(`${where}: expected a boolean (true/false), got ${JSON.stringify(raw)}`);
    }
    case 'int': {
      const s = String(raw).trim();
      if (!/^-?\d+$/.test(s)) throw new ConfigError(`${where}: expected an integer, got ${JSON.stringify(raw)}`);
      const n = Number(s);
      if (def.min !== undefined && n < def.min)
        throw new ConfigError(`${where}: must be at least ${def.min}, got ${n}`);
      if (def.max !== undefined && n > def.max) throw new ConfigError(`${where}: must be at most ${def.max}, got ${n}`);
      return n;
    }
    case 'enum': {
      const s = String(raw);
      if (!def.values?.includes(s))
        throw new ConfigError(`${where}: expected one of ${def.values?.join(', ')}, got ${JSON.stringify(s)}`);
      return s;
    }
    case 'string': {
      const s = String(raw);
      if (s === '') throw new ConfigError(`${where}: must not be empty`);
      void name;
      return s;
    }
  }
}

/**
 * Checks a Docker engine address the way the docker backend reads it (`unix:///path`, a bare
 * socket path, `tcp://`, `http://`, `https://`), so a typo stops the server at boot.
 */
/** Engines one server may pool (`--docker-host a,b,...`). */
const MAX_ENGINES = 64;

export function checkDockerHost(value: string, where: string): void {
  if (value.startsWith('/')) return;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError(
      `${where}: ${JSON.stringify(value)} is not an address; expected unix:///path/to/docker.sock or tcp://HOST:PORT`,
    );
  }
  const ok =
    url.protocol === 'unix:'
      ? url.pathname.length > 1
      : ['tcp:', 'http:', 'https:'].includes(url.protocol) && url.hostname !== '';
  if (!ok)
    throw new ConfigError(
      `${where}: unsupported docker host ${JSON.stringify(value)}; expected unix:///path/to/docker.sock or tcp://HOST:PORT`,
    );
}

/**
 * `--flag VALUE` becomes `--flag=VALUE` for every option that takes a value, so a value that
 * starts with `-` (`--max-sessions -3`) reaches validation instead of parseArgs' "ambiguous".
 */
function joinValues(argv: readonly string[]): string[] {
  const takesValue = new Set(
    (Object.values(OPTIONS) as OptionDef[]).filter((d) => d.kind !== 'bool').map((d) => `--${d.flag}`),
  );
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const next = argv[i + 1];
    if (takesValue.has(arg) && next !== undefined) {
      out.push(`${arg}=${next}`);
      i++;
    } else {
      out.push(arg);
    }
  }
  return out;
}

/** Parsed `--listen` value. */
export interface ListenAddress {
  readonly host: string;
  readonly port: number;
}

/** Parses `ws://HOST:PORT` (IPv6 in brackets); anything else is a clear error. */
export function parseListen(value: string): ListenAddress {
  const m = /^ws:\/\/(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})\/?$/.exec(value);
  if (!m || m[1] === undefined || m[2] === undefined) {
    throw new ConfigError(
      `--listen / EXEC_SERVER_LISTEN: unsupported address ${JSON.stringify(value)}; expected ws://HOST:PORT`,
    );
  }
  const port = Number(m[2]);
  if (port > 65535) throw new ConfigError(`--listen: port ${port} is out of range`);
  return { host: m[1].replace(/^\[|\]$/g, ''), port };
}

/** True for addresses only this machine can reach. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

/**
 * Builds the configuration from argv and environment. Throws `ConfigError` naming the first
 * bad value; unknown flags are errors too (a typo must not silently fall back to a default).
 */
export function loadConfig(argv: readonly string[], env: NodeJS.ProcessEnv): Config {
  const parseOptions: Record<string, { type: 'string' | 'boolean' }> = {};
  for (const def of Object.values(OPTIONS) as OptionDef[])
    parseOptions[def.flag] = { type: def.kind === 'bool' ? 'boolean' : 'string' };
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({ args: joinValues(argv), options: parseOptions, strict: true, allowPositionals: false })
      .values as Record<string, string | boolean | undefined>;
  } catch (err) {
    const message = (err as Error).message;
    if (/^Unexpected argument/.test(message))
      throw new ConfigError(
        `${message.replace(/\. This command.*$/, '')}: the server takes only --flag VALUE options (client commands: run, shell, sessions, cp, mcp; see --help)`,
      );
    throw new ConfigError(message);
  }
  const out: Record<string, unknown> = {};
  for (const [name, def] of Object.entries(OPTIONS) as [string, OptionDef][]) {
    let raw: string | boolean | undefined = values[def.flag] ?? env[def.env];
    if (raw === undefined && name === 'token') raw = env['CODEX_EXEC_SERVER_CONNECTION_TOKEN'];
    if (raw === undefined && name === 'dockerHost') raw = env['DOCKER_HOST'];
    out[name] = raw === undefined ? def.default : coerce(name, def, raw);
  }
  const config = out as Config;
  if (config.dockerHost !== undefined) {
    const where =
      values['docker-host'] !== undefined
        ? '--docker-host'
        : env['EXEC_SERVER_DOCKER_HOST'] !== undefined
          ? 'EXEC_SERVER_DOCKER_HOST'
          : 'DOCKER_HOST';
    const engines = config.dockerHost.split(',').map((e) => e.trim());
    if (engines.some((e) => e === ''))
      throw new ConfigError(`${where}: ${JSON.stringify(config.dockerHost)} has an empty engine address`);
    if (new Set(engines).size !== engines.length)
      throw new ConfigError(`${where}: ${JSON.stringify(config.dockerHost)} names an engine twice`);
    if (engines.length > MAX_ENGINES) throw new ConfigError(`${where}: at most ${MAX_ENGINES} engines`);
    for (const engine of engines) checkDockerHost(engine, where);
  }
  const listen = parseListen(config.listen);
  if (config.maxMemoryMb < config.memoryMb)
    throw new ConfigError(`--max-memory-mb (${config.maxMemoryMb}) is below --memory-mb (${config.memoryMb})`);
  if (config.maxCpus < config.cpus)
    throw new ConfigError(`--max-cpus (${config.maxCpus}) is below --cpus (${config.cpus})`);
  if (config.maxPids < config.pids)
    throw new ConfigError(`--max-pids (${config.maxPids}) is below --pids (${config.pids})`);
  if (config.maxDiskMb < config.diskMb)
    throw new ConfigError(`--max-disk-mb (${config.maxDiskMb}) is below --disk-mb (${config.diskMb})`);
  const socketDir = config.dockerAgentSocketDir;
  if (socketDir !== 'off' && (!isAbsolute(socketDir) || socketDir.length > MAX_SOCKET_DIR_LENGTH))
    throw new ConfigError(
      `--docker-agent-socket-dir: expected \`off\` or an absolute path of at most ${MAX_SOCKET_DIR_LENGTH} characters (a socket's path is limited to 108 bytes), got ${JSON.stringify(socketDir)}`,
    );
  if (config.runtime !== undefined && !RUNTIME_NAME.test(config.runtime))
    throw new ConfigError(`--runtime: ${JSON.stringify(config.runtime)} is not a runtime name`);
  if (config.allowedRuntimes !== undefined) runtimeList(config.allowedRuntimes);
  allowedOriginList(config.allowedOrigins);
  const everyone = sandboxTypeRules(config.allowedSandboxTypes)?.everyone ?? [];
  if (everyone.length > 0 && !everyone.includes(config.sandbox))
    throw new ConfigError(
      `--sandbox ${config.sandbox} (the default of new sessions) is not among --allowed-sandbox-types for every tenant (${everyone.join(', ')})`,
    );
  if (config.warmPoolRuntimes !== undefined) warmPoolRuntimes(config.warmPoolRuntimes);
  const hasAuth = config.token !== undefined || config.tokens !== undefined || config.tokensFile !== undefined;
  if (!isLoopback(listen.host) && !hasAuth && !config.insecureNoAuth) {
    throw new ConfigError(
      `refusing to listen on non-loopback address ${listen.host} without a token; set --token (or EXEC_SERVER_TOKENS) or pass --insecure-no-auth`,
    );
  }
  return config;
}

const RUNTIME_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** `--allowed-runtimes` as a list (`runc,runsc`). */
export function runtimeList(value: string): string[] {
  const names = value
    .split(',')
    .map((n) => n.trim())
    .filter((n) => n !== '');
  for (const n of names)
    if (!RUNTIME_NAME.test(n)) throw new ConfigError(`--allowed-runtimes: ${JSON.stringify(n)} is not a runtime name`);
  return names;
}

/**
 * `--allowed-origins` as a set of serialized origins: comma-separated `scheme://host[:port]`
 * (http or https), nothing else (no path, no wildcard).
 */
export function allowedOriginList(value: string | undefined): ReadonlySet<string> {
  const out = new Set<string>();
  for (const entry of (value ?? '').split(',').map((e) => e.trim())) {
    if (entry === '') continue;
    let url: URL | undefined;
    try {
      url = new URL(entry);
    } catch {
      url = undefined;
    }
    if (
      url === undefined ||
      !['http:', 'https:'].includes(url.protocol) ||
      url.pathname !== '/' ||
      url.search !== '' ||
      url.hash !== '' ||
      url.username !== '' ||
      !/^([a-z0-9-]+\.)*[a-z0-9-]+$|^\[[0-9a-f:.]+\]$/.test(url.hostname)
    )
      throw new ConfigError(
        `--allowed-origins / EXEC_SERVER_ALLOWED_ORIGINS: expected scheme://host[:port] entries, got ${JSON.stringify(entry)}`,
      );
    out.add(url.origin);
  }
  return out;
}

const SANDBOX_TYPES = ['workspace-write', 'read-only', 'danger-full-access'] as const;

/** Which sandbox types each tenant may ask for (`--allowed-sandbox-types`). */
export interface SandboxTypeRules {
  /** Types every tenant may ask for. */
  readonly everyone: readonly string[];
  /** Types one tenant may ask for besides those. */
  readonly byTenant: ReadonlyMap<string, readonly string[]>;
}

/** `--allowed-sandbox-types` parsed; undefined when unset (every type allowed). */
export function sandboxTypeRules(value: string | undefined): SandboxTypeRules | undefined {
  if (value === undefined) return undefined;
  const everyone = new Set<string>();
  const byTenant = new Map<string, Set<string>>();
  for (const entry of value.split(',').map((e) => e.trim())) {
    if (entry === '') continue;
    const i = entry.lastIndexOf(':');
    const tenant = i < 0 ? undefined : entry.slice(0, i).trim();
    const type = entry.slice(i + 1).trim();
    if (
      !(SANDBOX_TYPES as readonly string[]).includes(type) ||
      (tenant !== undefined && !/^[A-Za-z0-9_.-]{1,64}$/.test(tenant))
    )
      throw new ConfigError(
        `--allowed-sandbox-types / EXEC_SERVER_ALLOWED_SANDBOX_TYPES: expected TYPE or TENANT:TYPE entries (types: ${SANDBOX_TYPES.join(', ')}), got ${JSON.stringify(entry)}`,
      );
    if (tenant === undefined) everyone.add(type);
    else byTenant.set(tenant, new Set([...(byTenant.get(tenant) ?? []), type]));
  }
  return {
    everyone: [...everyone],
    byTenant: new Map([...byTenant].map(([t, types]) => [t, [...types]])),
  };
}

/** The sandbox types `tenant` may ask for under `rules` (undefined rules: all of them). */
export function allowedSandboxTypes(rules: SandboxTypeRules | undefined, tenant: string): readonly string[] {
  if (rules === undefined) return SANDBOX_TYPES;
  const own = rules.byTenant.get(tenant) ?? [];
  return SANDBOX_TYPES.filter((t) => rules.everyone.includes(t) || own.includes(t));
}

/** `--warm-pool-runtimes` as sizes by runtime (`runsc=2,runc=1`). */
export function warmPoolRuntimes(value: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const part of value
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '')) {
    const m = /^([A-Za-z0-9][A-Za-z0-9_.-]{0,127})=(\d{1,3})$/.exec(part);
    if (m === null || Number(m[2]) > 256)
      throw new ConfigError(`--warm-pool-runtimes: expected RUNTIME=N (N at most 256), got ${JSON.stringify(part)}`);
    out[m[1]!] = Number(m[2]);
  }
  return out;
}

/**
 * `argv` with the values of secret options (tokens) replaced, and which flags carried one.
 * The server shows the result as its command line: whatever runs on the host, sandboxed
 * commands without their own PID namespace included, can read a process's command line.
 */
export function redactSecretFlags(argv: readonly string[]): { argv: string[]; flags: string[] } {
  const secret = new Set((Object.values(OPTIONS) as OptionDef[]).filter((d) => d.secret).map((d) => `--${d.flag}`));
  const out: string[] = [];
  const flags: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const eq = a.indexOf('=');
    const name = eq > 0 ? a.slice(0, eq) : a;
    if (!secret.has(name)) {
      out.push(a);
      continue;
    }
    flags.push(name);
    if (eq > 0) out.push(`${name}=***`);
    else {
      out.push(a, '***');
      i++; // the value is the next argument
    }
  }
  return { argv: out, flags };
}

/** `--help` text, generated from the option table. */
export function helpText(): string {
  const lines = ['Usage: exec-server serve [options]', '', 'Options (each also settable by its environment variable):'];
  for (const def of Object.values(OPTIONS) as OptionDef[]) {
    const dflt = def.default === undefined ? '' : ` (default: ${String(def.default)})`;
    lines.push(`  --${def.flag}  [${def.env}]${dflt}`, `      ${def.description}`);
  }
  return lines.join('\n');
}

/** Markdown table of the options, as docs/guide.md shows it (test/unit/config.test.ts keeps them equal). */
export function markdownTable(): string {
  const rows = ['| Flag | Variable | Default | Meaning |', '|---|---|---|---|'];
  for (const [name, def] of Object.entries(OPTIONS) as [string, OptionDef][]) {
    const dflt =
      name === 'workspaceRoot'
        ? '`/var/lib/exec-server/workspaces` as root, else `$XDG_STATE_HOME/exec-server/workspaces` (`$TMPDIR/exec-server-<uid>/workspaces` where that cannot be made)'
        : name === 'dockerAgentSocketDir'
          ? '`$TMPDIR/exec-server-agents-<uid>`'
          : name === 'cpus'
            ? "half the host's CPUs (at least 1)"
            : def.default === undefined
              ? '(none)'
              : `\`${String(def.default)}\``;
    rows.push(`| \`--${def.flag}\` | \`${def.env}\` | ${dflt} | ${def.description.replace(/\|/g, '\\|')} |`);
  }
  return rows.join('\n');
}
