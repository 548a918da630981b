/**
 * Sessions on the wire: the spec a client creates one with (`initialize.session`,
 * `POST /v1/sessions`), its sandbox and approval policies, what `session/info` and the REST
 * API report, snapshots, and the approval request a server asks its client.
 */
import { Type, type Static } from 'typebox';
import {
  EnvNameSchema,
  ExecStringSchema,
  ImageRefSchema,
  KeyedRecord,
  literals,
  MAX_ENV_VARS,
  OneOf,
  PathSchema,
} from './common.ts';

/** A session's sandbox policy, Codex's three kinds: what its commands may write and reach. */
export const SandboxPolicySchema = Type.Union([
  Type.Object(
    {
      type: Type.Literal('workspace-write'),
      writableRoots: Type.Optional(Type.Array(PathSchema, { maxItems: 64 })),
      networkAccess: Type.Optional(Type.Boolean()),
      excludeSlashTmp: Type.Optional(Type.Boolean()),
    },
    { additionalProperties: false },
  ),
  Type.Object(
    { type: Type.Literal('read-only'), networkAccess: Type.Optional(Type.Boolean()) },
    { additionalProperties: false },
  ),
  Type.Object({ type: Type.Literal('danger-full-access') }, { additionalProperties: false }),
]);
export type SandboxPolicy = Static<typeof SandboxPolicySchema>;

/** When a command needs a person's approval: Codex's approval policies. */
export const ApprovalPolicySchema = Type.Union([
  ...literals(['untrusted', 'on-failure', 'on-request', 'never']),
  Type.Object(
    { granular: Type.Object({ sandboxApproval: Type.Boolean() }, { additionalProperties: false }) },
    { additionalProperties: false },
  ),
]);
export type ApprovalPolicy = Static<typeof ApprovalPolicySchema>;

/**
 * `network.allow` (docs/protocol.md, "Egress"): the destinations the session's commands reach
 * through its proxy. Without `network` the session has no network (unless its sandbox grants it).
 */
export const NetworkSpecSchema = Type.Object(
  {
    allow: Type.Array(Type.String({ minLength: 1, maxLength: 300 }), {
      maxItems: 256,
      description:
        'Entries: `*`, `host`, `host:port`, `*.domain[:port]`, `ip[:port]` (`[v6]:port`), `cidr[:port]`; loopback, link-local and private addresses only by an ip/cidr entry',
    }),
  },
  { additionalProperties: false },
);
export type NetworkSpec = Static<typeof NetworkSpecSchema>;

/** A session's egress as `session/info` reports it: the list, the proxy, the counts so far. */
export const EgressInfoSchema = Type.Object({
  allow: Type.Array(Type.String()),
  proxy: Type.String({ description: 'The proxy URL inside the session (also in HTTP_PROXY and friends)' }),
  connections: Type.Integer({ description: 'Connections relayed' }),
  refused: Type.Integer({ description: 'Connections refused (403)' }),
  active: Type.Integer({ description: 'Connections open now' }),
  bytesOut: Type.Integer({ description: 'Bytes the session sent' }),
  bytesIn: Type.Integer({ description: 'Bytes the session received' }),
});
export type EgressInfo = Static<typeof EgressInfoSchema>;

/** The spec a session is created with (`initialize.session`, `POST /v1/sessions`); everything optional. */
export const SessionSpecSchema = Type.Object(
  {
    image: Type.Optional(ImageRefSchema),
    snapshot: Type.Optional(ImageRefSchema),
    runtime: Type.Optional(
      Type.String({
        pattern: '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$',
        description: "OCI runtime of the container (docker backend), one of the server's allowed runtimes",
      }),
    ),
    workdir: Type.Optional(PathSchema),
    env: Type.Optional(KeyedRecord(EnvNameSchema(1024), ExecStringSchema(131072), MAX_ENV_VARS)),
    labels: Type.Optional(
      KeyedRecord(Type.String({ pattern: '^[A-Za-z0-9_.-]{1,63}$' }), Type.String({ maxLength: 256 }), 64),
    ),
    sandbox: Type.Optional(SandboxPolicySchema),
    denyRead: Type.Optional(Type.Array(PathSchema, { maxItems: 256 })),
    approvalPolicy: Type.Optional(ApprovalPolicySchema),
    strictAutoReview: Type.Optional(Type.Boolean()),
    previewPorts: Type.Optional(
      Type.Boolean({ description: 'Allow exposing TCP ports of the session as preview URLs (default false)' }),
    ),
    network: Type.Optional(NetworkSpecSchema),
    resources: Type.Optional(
      Type.Object(
        {
          memoryMb: Type.Optional(Type.Integer({ minimum: 16 })),
          // The engine's smallest share: less rounds to no limit at all, or fails in the kernel.
          cpus: Type.Optional(Type.Number({ minimum: 0.01 })),
          pids: Type.Optional(Type.Integer({ minimum: 8 })),
          diskMb: Type.Optional(
            Type.Integer({
              minimum: 16,
              description:
                "Disk limit in MiB (the container's writable layer on docker; workspace and private /tmp on local)",
            }),
          ),
        },
        { additionalProperties: false },
      ),
    ),
    idleTimeoutSeconds: Type.Optional(Type.Integer({ minimum: 1 })),
    maxLifetimeSeconds: Type.Optional(Type.Integer({ minimum: 1 })),
  },
  { additionalProperties: false },
);
export type SessionSpec = Static<typeof SessionSpecSchema>;

/** A session's resource use now, against its limits (`session/info`, `?usage=true`). */
export const ResourceUsageSchema = Type.Object(
  {
    cpuPercent: Type.Union([Type.Number(), Type.Null()], {
      description: 'CPU use since the previous sample, in percent of one CPU; null on the first sample',
    }),
    cpuSeconds: Type.Number({ description: 'CPU time used so far (local: by the live process trees)' }),
    memoryBytes: Type.Integer(),
    memoryLimitBytes: Type.Union([Type.Integer(), Type.Null()]),
    pids: Type.Integer(),
    pidsLimit: Type.Union([Type.Integer(), Type.Null()]),
    sampledAt: Type.String(),
  },
  { description: 'Resource use now (docker: the engine stats; local: the process trees of the running commands)' },
);
export type ResourceUsage = Static<typeof ResourceUsageSchema>;

/** A port of the session exposed as a preview URL (src/preview/). */
export const ExposedPortSchema = Type.Object({ port: Type.Integer(), exposedAt: Type.String() });
export type ExposedPort = Static<typeof ExposedPortSchema>;

/** `hibernated`: checkpointed and stopped (docker); the next call that needs it wakes it. */
export const HibernationStateSchema = OneOf(['awake', 'hibernating', 'hibernated', 'waking']);

/** What `session/hibernate`, `session/wake` and their HTTP routes answer. */
export const HibernationAnswerSchema = Type.Object({
  sessionId: Type.String(),
  hibernation: HibernationStateSchema,
  hibernatedAt: Type.Optional(Type.String()),
});
export type HibernationAnswer = Static<typeof HibernationAnswerSchema>;

/** What `session/info` and the REST API report of a session; open to fields a backend adds. */
export const SessionInfoSchema = Type.Object(
  {
    sessionId: Type.String(),
    tenant: Type.String(),
    backend: Type.String(),
    sandboxType: Type.String(),
    sandboxUnavailableReason: Type.Optional(Type.String()),
    sandbox: SandboxPolicySchema,
    approvalPolicy: ApprovalPolicySchema,
    denialHandling: Type.String(),
    image: Type.Optional(Type.String()),
    containerId: Type.Optional(Type.String()),
    execPath: Type.Optional(
      OneOf(['agent', 'exec'], {
        description: 'Docker: the exec agent inside the container, or one engine exec per command (the fallback)',
      }),
    ),
    execPathReason: Type.Optional(Type.String({ description: 'Docker, exec path: why the agent is not used' })),
    agentTransport: Type.Optional(
      OneOf(['socket', 'exec-stream'], {
        description:
          "Docker, agent path: the agent's socket reached directly (a directory shared with the engine's host) or through an attached engine exec",
      }),
    ),
    runtime: Type.Optional(Type.String({ description: 'OCI runtime of the container (docker)' })),
    hibernation: Type.Optional(HibernationStateSchema),
    hibernatedAt: Type.Optional(Type.String()),
    workdir: Type.String(),
    status: OneOf(['alive', 'dead']),
    attached: Type.Boolean({ description: 'A WebSocket client is attached' }),
    processes: Type.Integer(),
    runningProcesses: Type.Integer(),
    labels: Type.Record(Type.String(), Type.String()),
    createdAt: Type.String(),
    expiresAt: Type.String(),
    usage: Type.Optional(Type.Union([ResourceUsageSchema, Type.Null()])),
    diskLimitBytes: Type.Optional(Type.Integer({ description: 'Disk limit of the session (`resources.diskMb`)' })),
    diskEnforcement: Type.Optional(
      OneOf(['engine', 'watch'], {
        description:
          '`engine`: the container engine enforces the limit (writes fail past it); `watch`: the server measures the use periodically and stops the session past it',
      }),
    ),
    diskUsedBytes: Type.Optional(Type.Integer({ description: 'Disk use at the last measurement (watch only)' })),
    diskMeasuredAt: Type.Optional(Type.String({ description: 'When `diskUsedBytes` was measured' })),
    diskExceeded: Type.Optional(
      Type.Boolean({
        description: 'The last measurement was past the limit: new processes are refused (EXEC_ERR_DISK_LIMIT)',
      }),
    ),
    ports: Type.Array(ExposedPortSchema, { description: 'Exposed preview ports' }),
    egress: Type.Optional(EgressInfoSchema),
  },
  { additionalProperties: true },
);
export type SessionInfo = Static<typeof SessionInfoSchema>;

/** `?usage=true` adds each session's resource use to the list (one backend stats call per session). */
export const SessionListQuerySchema = Type.Object({ usage: Type.Optional(Type.Boolean()) });

/** `GET /v1/sessions`'s answer, and a batch create's. */
export const SessionListSchema = Type.Object({ sessions: Type.Array(SessionInfoSchema) });

/** Sessions one `POST /v1/sessions?count=N` makes at most. */
export const MAX_SESSION_BATCH = 256;

/**
 * `?count=N` makes N sessions of the same spec at once (best-of-N, rollouts), answered as a
 * list; all of them or none (a failure removes the ones already made).
 */
export const SessionCreateQuerySchema = Type.Object({
  count: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_SESSION_BATCH })),
});

/** `POST /v1/sessions` answers one session, or `{sessions}` when `count` was given. */
export const SessionCreateResultSchema = Type.Union([SessionInfoSchema, SessionListSchema]);

/**
 * A name a client gives a snapshot: an image tag's characters, beginning with a letter or digit
 * as a runtime's name does. So `.`, `..` and names beginning with `.`, `-` or `_` are refused: a
 * template pool could not name them (`--warm-pool-templates NAME=N` takes none of them), and
 * where an operator types one it reads as a path or an option.
 */
export const SnapshotNameSchema = Type.String({
  minLength: 1,
  maxLength: 128,
  pattern: '^[A-Za-z0-9][A-Za-z0-9_.-]*$',
});
/** `POST /v1/sessions/:id/snapshots`: an optional name, and whether to keep the memory too. */
export const SnapshotBodySchema = Type.Object(
  {
    name: Type.Optional(SnapshotNameSchema),
    memory: Type.Optional(
      Type.Boolean({
        description:
          'Keep the memory too (docker, gVisor): a live template; sessions made from it start with its processes running',
      }),
    ),
  },
  { additionalProperties: false },
);

/** Most sessions one fork makes. */
export const MAX_FORK_COUNT = 16;

/** `POST /v1/sessions/:id/fork` and `session/fork`: how many sessions, with or without the memory. */
export const ForkBodySchema = Type.Object(
  {
    count: Type.Optional(
      Type.Integer({ minimum: 1, maximum: MAX_FORK_COUNT, description: 'Sessions to make (default 1)' }),
    ),
    memory: Type.Optional(
      Type.Boolean({
        description:
          'Fork the memory too (docker, gVisor): every process of the source runs on in each fork; without it only the files are copied',
      }),
    ),
    name: Type.Optional(SnapshotNameSchema),
  },
  { additionalProperties: false },
);

/** A snapshot as it is listed and answered (docs/snapshots.md). */
export const SnapshotInfoSchema = Type.Object({
  snapshotId: Type.String(),
  name: Type.Optional(Type.String()),
  sessionId: Type.Optional(Type.String()),
  tenant: Type.Optional(Type.String()),
  createdAt: Type.String(),
  memory: Type.Optional(Type.Boolean({ description: 'A live template: it holds the memory of its session' })),
  checkpointBytes: Type.Optional(Type.Integer({ description: 'Size of its memory checkpoint' })),
  pauseMs: Type.Optional(Type.Integer({ description: 'How long the session was stopped for the checkpoint' })),
});
export type SnapshotInfo = Static<typeof SnapshotInfoSchema>;

/** `GET /v1/snapshots`'s and `GET /v1/sessions/:id/snapshots`'s answer. */
export const SnapshotListSchema = Type.Object({ snapshots: Type.Array(SnapshotInfoSchema) });

export type ForkBody = Static<typeof ForkBodySchema>;

/** A fork's answer: the snapshot the forks were made from, and the new sessions (attach to them by id). */
export const ForkAnswerSchema = Type.Object({
  snapshot: SnapshotInfoSchema,
  sessions: Type.Array(SessionInfoSchema),
});
export type ForkAnswer = Static<typeof ForkAnswerSchema>;
/** The `:id` path param of every session route. */
export const SessionParamsSchema = Type.Object({ id: Type.String({ minLength: 1, maxLength: 128 }) });
/** The `:id` path param of `DELETE /v1/snapshots/:id`, an image reference. */
export const SnapshotParamsSchema = Type.Object({ id: ImageRefSchema });
/** `/v1/sessions/:id/snapshots/:snapshotId`: a snapshot taken of that session. */
export const SessionSnapshotParamsSchema = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 128 }),
  snapshotId: ImageRefSchema,
});

/**
 * Where the pull of a session's image stands: sent as `session/imagePull` to the connection whose
 * `initialize` waits for it, and listed by `GET /v1/images/pulls` (docs/protocol.md).
 */
export const ImagePullSchema = Type.Object({
  image: Type.String(),
  phase: OneOf(['pulling', 'pulled', 'failed'], { description: '`pulled` and `failed` are the last word on a pull' }),
  currentBytes: Type.Integer({ description: 'Bytes of the layers downloaded so far' }),
  totalBytes: Type.Integer({
    description: 'Sizes of the layers the engine has announced so far (grows while it learns of layers)',
  }),
  layers: Type.Integer({ description: 'Layers the engine has announced' }),
  layersDone: Type.Integer({ description: 'Layers downloaded (or already present)' }),
  startedAt: Type.String(),
  error: Type.Optional(Type.String({ description: 'Why the pull failed (phase `failed`)' })),
});
export type ImagePull = Static<typeof ImagePullSchema>;

/** A pull's figures in words, the same in the log, `/readyz`, the CLI and MCP: "12.3 of 45.6 MB, 2 of 3 layers". */
export function describeImagePull(f: Pick<ImagePull, 'currentBytes' | 'totalBytes' | 'layers' | 'layersDone'>): string {
  const mb = (n: number): string => (n / 1e6).toFixed(1);
  const layers = `${f.layersDone} of ${f.layers} layers`;
  return f.totalBytes > 0 ? `${mb(f.currentBytes)} of ${mb(f.totalBytes)} MB, ${layers}` : layers;
}

/** `GET /v1/images/pulls`'s answer. */
export const ImagePullListSchema = Type.Object({ pulls: Type.Array(ImagePullSchema) });

/**
 * `server/draining`: the server is stopping for a rollout (`--shutdown-sessions keep`) and is
 * about to close this connection with code 1012. The session and its processes stay; reconnect
 * (through the same address: another replica, or the next server) and resume with
 * `resumeSessionId`, reading each process from its last seq (docs/protocol.md).
 */
export const DrainingNotificationSchema = Type.Object({
  reason: Type.String(),
  reconnect: Type.Boolean({ description: 'true: the session outlives this server; resume it elsewhere' }),
  retryAfterMs: Type.Integer({ minimum: 0, description: 'Suggested wait before the first reconnect attempt' }),
});
export type DrainingNotification = Static<typeof DrainingNotificationSchema>;

// ---- approvals (server-to-client `approval/request`, and the HTTP approval queue) ----

/** Why a command asks: before its first attempt, or to run again without the sandbox. */
export const ApprovalPurposeSchema = OneOf(['initial', 'sandbox-retry']);
export type ApprovalPurpose = Static<typeof ApprovalPurposeSchema>;

/** A person's answer to an approval (Codex's decisions). */
export const ApprovalDecisionSchema = OneOf(['approved', 'approved-for-session', 'denied', 'abort']);
export type ApprovalDecision = Static<typeof ApprovalDecisionSchema>;

/** Params of `approval/request`: which command wants to run, and why a person is asked. */
export const ApprovalRequestSchema = Type.Object({
  processId: Type.String(),
  argv: Type.Array(Type.String()),
  cwd: Type.String(),
  purpose: ApprovalPurposeSchema,
  reason: Type.String(),
});
export type ApprovalRequest = Static<typeof ApprovalRequestSchema>;

/** The client's answer to `approval/request`; anything else counts as `denied`. */
export const ApprovalAnswerSchema = Type.Object({ decision: ApprovalDecisionSchema });
export type ApprovalAnswer = Static<typeof ApprovalAnswerSchema>;
