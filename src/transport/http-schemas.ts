/** TypeBox schemas of the REST routes; the OpenAPI document is generated from them. */
import { Type } from 'typebox';
import { ResourceUsageSchema } from '../sessions/resource-usage.ts';
import { ApprovalPolicySchema, SandboxPolicySchema } from '../sessions/session-spec.ts';

export { ErrorSchema } from '../tools/schemas.ts';

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
    execPath: Type.Optional(Type.Union([Type.Literal('agent'), Type.Literal('exec')], { description: 'Docker: the exec agent inside the container, or one engine exec per command (the fallback)' })),
    execPathReason: Type.Optional(Type.String({ description: 'Docker, exec path: why the agent is not used' })),
    workdir: Type.String(),
    status: Type.Union([Type.Literal('alive'), Type.Literal('dead')]),
    attached: Type.Boolean({ description: 'A WebSocket client is attached' }),
    processes: Type.Integer(),
    runningProcesses: Type.Integer(),
    labels: Type.Record(Type.String(), Type.String()),
    createdAt: Type.String(),
    expiresAt: Type.String(),
    usage: Type.Optional(Type.Union([ResourceUsageSchema, Type.Null()])),
  },
  { additionalProperties: true },
);

/** `?usage=true` adds each session's resource use to the list (one backend stats call per session). */
export const SessionListQuerySchema = Type.Object({ usage: Type.Optional(Type.Boolean()) });

export const SessionListSchema = Type.Object({ sessions: Type.Array(SessionInfoSchema) });

export const SnapshotBodySchema = Type.Object({ name: Type.Optional(Type.String({ minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9_.-]+$' })) }, { additionalProperties: false });

export const SnapshotInfoSchema = Type.Object({
  snapshotId: Type.String(),
  name: Type.Optional(Type.String()),
  sessionId: Type.Optional(Type.String()),
  tenant: Type.Optional(Type.String()),
  createdAt: Type.String(),
});

export const SnapshotListSchema = Type.Object({ snapshots: Type.Array(SnapshotInfoSchema) });
export const SnapshotParamsSchema = Type.Object({ id: Type.String({ minLength: 1, maxLength: 512 }) });
