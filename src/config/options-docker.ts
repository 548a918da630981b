/**
 * Options of the server: the docker backend, previews, shutdown, session tokens and the audit log. One part of the option table that
 * src/config.ts puts together in this order (the order of `--help` and docs/guide.md).
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { OptionDef } from './option-def.ts';

/** Per uid, so that servers of different users never share (or fight over) one directory. */
function defaultAgentSocketDir(): string {
  return join(tmpdir(), `exec-server-agents-${process.getuid?.() ?? 0}`);
}

export const DOCKER_OPTIONS = {
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
  checkpointDir: {
    flag: 'checkpoint-dir',
    env: 'EXEC_SERVER_CHECKPOINT_DIR',
    kind: 'string',
    default: '/var/lib/exec-server/checkpoints',
    description:
      "Docker: where memory checkpoints of live templates and forks are kept (made root-only; never mounted into a container). Must be on the engine's host, which also holds the engine's data directory (docs/snapshots.md).",
  },
  checkpointMaxMb: {
    flag: 'checkpoint-max-mb',
    env: 'EXEC_SERVER_CHECKPOINT_MAX_MB',
    kind: 'int',
    default: 4096,
    min: 1,
    max: 1048576,
    description:
      'Docker: a session using more memory than this (MiB) is refused a memory snapshot or fork, and so is a checkpoint larger than this.',
  },
  warmPool: {
    flag: 'warm-pool',
    env: 'EXEC_SERVER_WARM_POOL',
    kind: 'int',
    default: 2,
    min: 0,
    max: 256,
    description:
      'Started containers of the default image kept ready at least (docker); the pool grows with demand up to `--warm-pool-max` and shrinks back after `--warm-pool-idle-seconds`. 0 turns the pool off. Each replica of a fleet keeps its own.',
  },
  warmPoolMax: {
    flag: 'warm-pool-max',
    env: 'EXEC_SERVER_WARM_POOL_MAX',
    kind: 'int',
    default: 64,
    min: 0,
    max: 1024,
    description:
      'Containers a warm pool holds at most when sized by demand: the most sessions it could serve asked for within 10 s (per runtime and per engine).',
  },
  warmPoolIdleSeconds: {
    flag: 'warm-pool-idle-seconds',
    env: 'EXEC_SERVER_WARM_POOL_IDLE_SECONDS',
    kind: 'int',
    default: 300,
    min: 1,
    max: 86_400,
    description: 'How long a burst keeps a warm pool sized for it; then it shrinks back toward `--warm-pool`.',
  },
  dockerCreateConcurrency: {
    flag: 'docker-create-concurrency',
    env: 'EXEC_SERVER_DOCKER_CREATE_CONCURRENCY',
    kind: 'int',
    default: 16,
    min: 1,
    max: 256,
    description:
      'Container creates one engine runs at once; sessions asked for go first, warm-pool refills take at most half and only while none waits.',
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
  warmPoolTemplates: {
    flag: 'warm-pool-templates',
    env: 'EXEC_SERVER_WARM_POOL_TEMPLATES',
    kind: 'string',
    default: undefined,
    description:
      'Docker: containers kept restored from live templates (memory snapshots), by name or id: `warm-repl=2`. A session made from the template with default resources claims one, its processes running, instead of waiting for a restore. On the first runtime that can checkpoint (gVisor); each replica of a fleet keeps its own.',
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
  fleet: {
    flag: 'fleet',
    env: 'EXEC_SERVER_FLEET',
    kind: 'bool',
    default: false,
    description:
      'Docker: this server is one replica of a fleet, the servers sharing --instance-id and the engine(s): each holds its own replica lease, serves any session of the fleet (forwarding to the replica that owns it) and takes over the sessions of replicas that are gone. Off: one live server per instance id.',
  },
  replicaId: {
    flag: 'replica-id',
    env: 'EXEC_SERVER_REPLICA_ID',
    kind: 'string',
    default: undefined,
    description:
      "With --fleet: this replica's name in the fleet (letters, digits, `_.-`, at most 63; e.g. the pod name); default a random one per process.",
  },
  advertiseUrl: {
    flag: 'advertise-url',
    env: 'EXEC_SERVER_ADVERTISE_URL',
    kind: 'string',
    default: undefined,
    description:
      'With --fleet: the `http://HOST:PORT` at which the other replicas reach this one (kept in its lease); default derived from --listen (which then needs a fixed port).',
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
      'Key that signs preview URLs (same value on every replica); default derived from the tenant tokens, else random per process (its signed URLs end with it).',
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
  shutdownSessions: {
    flag: 'shutdown-sessions',
    env: 'EXEC_SERVER_SHUTDOWN_SESSIONS',
    kind: 'enum',
    values: ['end', 'keep'],
    default: 'end',
    description:
      'What SIGTERM does to the sessions (docker): `end` removes them (a single server), `keep` (always with `--fleet`) drains instead: `/readyz` fails, WebSocket clients get `server/draining` and close code 1012 and reconnect, and the containers and their commands keep running for the next server with the same instance id.',
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
  auditLogMaxBytes: {
    flag: 'audit-log-max-bytes',
    env: 'EXEC_SERVER_AUDIT_LOG_MAX_BYTES',
    kind: 'int',
    default: 100 * 1024 * 1024,
    min: 0,
    max: 2 ** 50,
    description:
      'Rotate a file audit log before it passes this size: it becomes PATH.1 (older ones PATH.2...) and the chain goes on in a new PATH (0: never; otherwise at least 1048576).',
  },
  auditLogMaxFiles: {
    flag: 'audit-log-max-files',
    env: 'EXEC_SERVER_AUDIT_LOG_MAX_FILES',
    kind: 'int',
    default: 0,
    min: 0,
    max: 100_000,
    description: 'Rotated audit log files kept (PATH.1...); the oldest past it is removed (0: keep every one).',
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
