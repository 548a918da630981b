/**
 * Input schemas of the MCP tools. The command tools take exactly the HTTP facade's bodies
 * (`src/protocol/tools.ts`) and `create_session` the session spec, each plus the optional
 * `session` that picks the exec-server session; so the MCP endpoint and the HTTP routes can
 * never disagree on what an argument means. TypeBox schemas are JSON Schema, which is what an
 * MCP tool listing carries.
 */
import { Type, type Static, type TObject, type TProperties, type TSchema } from 'typebox';
import {
  DecisionBodySchema,
  ExecCommandBodySchema,
  ForkBodySchema,
  PortBodySchema,
  MAX_SESSION_BATCH,
  SessionSpecSchema,
  SnapshotNameSchema,
  WriteStdinBodySchema,
} from '../protocol/index.ts';

/** Largest `read_file` answer (bytes): a model's context is the real limit. */
export const MAX_READ_BYTES = 1024 * 1024;
/** `read_file`'s `max_bytes` when a call gives none. */
export const DEFAULT_READ_BYTES = 256 * 1024;
/** Largest `write_file` content (characters of text or base64). */
export const MAX_WRITE_CHARS = 16 * 1024 * 1024;
/** Entries `list_dir` shows at most. */
export const MAX_LIST_ENTRIES = 1000;

const SessionArg = Type.Optional(
  Type.String({
    minLength: 1,
    maxLength: 128,
    description:
      'exec-server session id (from create_session or list_sessions). Default: the session bound to this MCP connection; the first call binds one, and one with default settings is created when none is bound.',
  }),
);

/** `schema`'s properties plus `session`, as a closed object (the MCP client sees every field). */
function withSession<P extends TProperties>(
  properties: P,
  extra: { description?: string } = {},
): TObject<P & { session: typeof SessionArg }> {
  return Type.Object({ ...properties, session: SessionArg }, { additionalProperties: false, ...extra });
}

const FilePath = Type.String({
  minLength: 1,
  maxLength: 4096,
  description: 'Path inside the session: absolute, a file:// URI, or relative to the session workspace',
});

/** `exec_command`: the HTTP facade's body plus `session`. */
export const ExecCommandArgsSchema = withSession(ExecCommandBodySchema.properties);
/** `write_stdin`: the HTTP facade's body plus `session`. */
export const WriteStdinArgsSchema = withSession(WriteStdinBodySchema.properties);

/** `read_file`: a path, where to start and how much. */
export const ReadFileArgsSchema = withSession({
  path: FilePath,
  offset: Type.Optional(
    Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: 'Byte offset to start at (default 0)' }),
  ),
  max_bytes: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: MAX_READ_BYTES,
      description: `Bytes to return at most (default ${DEFAULT_READ_BYTES})`,
    }),
  ),
});

/** `write_file`: a path and its new content, text or base64. */
export const WriteFileArgsSchema = withSession({
  path: FilePath,
  content: Type.String({
    maxLength: MAX_WRITE_CHARS,
    description: 'The new content of the file (created or replaced)',
  }),
  encoding: Type.Optional(
    Type.Union([Type.Literal('utf8'), Type.Literal('base64')], {
      description: 'How `content` is encoded (default utf8)',
    }),
  ),
  create_parents: Type.Optional(Type.Boolean({ description: 'Create missing parent directories (default true)' })),
});

/** `list_dir`: the directory to list. */
export const ListDirArgsSchema = withSession({
  path: Type.Optional({ ...FilePath, description: 'Directory to list (default: the session workspace)' }),
});

/** `create_session`: the session spec, plus whether to bind it and how many to make. */
export const CreateSessionArgsSchema = Type.Object(
  {
    ...SessionSpecSchema.properties,
    bind: Type.Optional(Type.Boolean({ description: 'Make it the session of this MCP connection (default true)' })),
    count: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_SESSION_BATCH,
        description:
          'Make this many sessions of the spec at once (best-of-N): all or none; with more than one, none is bound',
      }),
    ),
  },
  { additionalProperties: false },
);

/** `list_sessions` takes no arguments. */
export const ListSessionsArgsSchema = Type.Object({}, { additionalProperties: false });

// The bounds are the HTTP routes' own (snapshot name, port, signed URL validity); only the
// descriptions speak to a model.
/** `snapshot_session`: an optional snapshot name. */
export const SnapshotSessionArgsSchema = withSession({
  name: Type.Optional({
    ...SnapshotNameSchema,
    description: 'Snapshot name (letters, digits, _ . -; begins with a letter or digit)',
  }),
});

/** `fork_session`: how many forks, with or without the running processes. */
export const ForkSessionArgsSchema = withSession({
  count: Type.Optional({ ...ForkBodySchema.properties.count, description: 'How many forks (default 1, at most 16)' }),
  memory: Type.Optional({
    ...ForkBodySchema.properties.memory,
    description: 'Fork the running processes too (gVisor sessions): each fork goes on from where the source was',
  }),
});

/** `expose_port`: the port and how long its signed URL lasts. */
export const ExposePortArgsSchema = withSession({
  port: {
    ...PortBodySchema.properties.port,
    description: 'TCP port a server in the session listens on (127.0.0.1 or all addresses)',
  },
  ttl_seconds: Type.Optional({
    ...PortBodySchema.properties.ttlSeconds,
    description: 'Validity of the signed URL in seconds (default: the server setting, 1 hour)',
  }),
});

/** `decide_approval`: the approval an `approval_required` result named, and the decision. */
export const DecideApprovalArgsSchema = withSession({
  approval_id: Type.String({
    minLength: 1,
    maxLength: 128,
    description: 'The approval_id an approval_required result named',
  }),
  decision: DecisionBodySchema.properties.decision,
});

export type ExecCommandToolArgs = Static<typeof ExecCommandArgsSchema>;
export type WriteStdinToolArgs = Static<typeof WriteStdinArgsSchema>;
export type ReadFileToolArgs = Static<typeof ReadFileArgsSchema>;
export type WriteFileToolArgs = Static<typeof WriteFileArgsSchema>;
export type ListDirToolArgs = Static<typeof ListDirArgsSchema>;
export type CreateSessionToolArgs = Static<typeof CreateSessionArgsSchema>;
export type SnapshotSessionToolArgs = Static<typeof SnapshotSessionArgsSchema>;
export type ForkSessionToolArgs = Static<typeof ForkSessionArgsSchema>;
export type ExposePortToolArgs = Static<typeof ExposePortArgsSchema>;
export type DecideApprovalToolArgs = Static<typeof DecideApprovalArgsSchema>;

/** A tool's JSON Schema as plain data (TypeBox keeps its own markers off the wire). */
export function jsonSchema(schema: TSchema): { type: 'object'; [key: string]: unknown } {
  return JSON.parse(JSON.stringify(schema)) as { type: 'object'; [key: string]: unknown };
}

/**
 * The body of `POST /v1/sessions/{id}/mcp-call`, which one replica sends another
 * (forwarded-calls.ts): the tool call as the MCP client made it, its client's name (which decides
 * the default denial handling) and the origin it reached the server at (for preview URLs).
 */
export const ForwardedCallSchema = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 64 }),
    arguments: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    clientName: Type.Optional(Type.String({ maxLength: 256 })),
    origin: Type.Optional(Type.String({ maxLength: 2048 })),
  },
  { additionalProperties: false },
);
export type ForwardedCall = Static<typeof ForwardedCallSchema>;
