/**
 * The HTTP tool facade on the wire (Codex's unified exec: `exec_command`, `write_stdin`, tool
 * calls and the approval follow-up): request bodies and answers.
 */
import { Type, type Static } from 'typebox';
import { NO_NUL, OneOf, Opt } from './common.ts';
import { ApprovalDecisionSchema, ApprovalPurposeSchema } from './session.ts';

/** `POST .../exec_command`: Codex's `exec_command` arguments; fields it adds later pass through. */
export const ExecCommandBodySchema = Type.Object(
  {
    cmd: Type.String({ ...NO_NUL, minLength: 1, maxLength: 1024 * 1024, description: 'Shell command line' }),
    workdir: Opt(
      Type.String({
        ...NO_NUL,
        maxLength: 4096,
        description: 'Working directory; relative paths join the session workspace',
      }),
    ),
    shell: Opt(Type.String({ ...NO_NUL, maxLength: 4096, description: 'Shell binary (default: the session shell)' })),
    login: Opt(Type.Boolean({ description: 'Run as a login shell (-lc, default) or not (-c)' })),
    tty: Opt(Type.Boolean({ description: 'Allocate a PTY (stdin stays open for write_stdin)' })),
    yield_time_ms: Opt(
      Type.Integer({ minimum: 0, description: 'How long to wait for output (default 10000, clamped to 250..30000)' }),
    ),
    max_output_tokens: Opt(
      Type.Integer({ minimum: 0, description: 'Output budget in approximate tokens (4 bytes each; default 10000)' }),
    ),
    sandbox_permissions: Opt(OneOf(['use_default', 'require_escalated'])),
    justification: Opt(Type.String({ maxLength: 8192 })),
    prefix_rule: Opt(Type.Array(Type.String({ maxLength: 4096 }), { maxItems: 256 })),
  },
  { additionalProperties: true },
);
export type ExecCommandArgs = Static<typeof ExecCommandBodySchema>;

/** `POST .../write_stdin`: Codex's `write_stdin` arguments; an empty `chars` polls. */
export const WriteStdinBodySchema = Type.Object(
  {
    session_id: Type.Integer({ description: 'The session_id an exec_command answered with' }),
    chars: Opt(Type.String({ maxLength: 1024 * 1024, description: 'Bytes to write; empty polls for output' })),
    yield_time_ms: Opt(
      Type.Integer({ minimum: 0, description: 'Default 250; a poll waits 5000..300000, a write at most 30000' }),
    ),
    max_output_tokens: Opt(Type.Integer({ minimum: 0 })),
  },
  { additionalProperties: true },
);
export type WriteStdinArgs = Static<typeof WriteStdinBodySchema>;

/** What `exec_command` and `write_stdin` answer: the output so far, and the exit or the `session_id` to go on with. */
export const ExecResultSchema = Type.Object({
  chunk_id: Type.String(),
  wall_time_seconds: Type.Number(),
  exit_code: Type.Optional(Type.Integer({ description: 'Present when the process ended' })),
  session_id: Type.Optional(Type.Integer({ description: 'Present while the process runs: pass it to write_stdin' })),
  original_token_count: Type.Integer(),
  output: Type.String(),
  text: Type.String({ description: 'The block Codex shows its model' }),
  sandbox_denied: Type.Optional(Type.Boolean()),
  warning: Type.Optional(Type.String()),
});
export type ExecToolResult = Static<typeof ExecResultSchema>;

/** A command waiting for an HTTP client's approval (`GET .../approvals`). */
export const ApprovalSchema = Type.Object({
  id: Type.String(),
  purpose: ApprovalPurposeSchema,
  reason: Type.String(),
  argv: Type.Array(Type.String()),
  cwd: Type.String(),
  createdAt: Type.String(),
  expiresAt: Type.String(),
});

/** `GET .../approvals`'s answer. */
export const ApprovalListSchema = Type.Object({ approvals: Type.Array(ApprovalSchema) });

/** The 202 of `exec_command` or a tool call whose command waits for an approval. */
export const ApprovalRequiredSchema = Type.Object({
  status: Type.Literal('approval_required'),
  call_id: Type.Optional(Type.String()),
  approval_id: Type.String(),
  approval: ApprovalSchema,
});
export type ApprovalRequired = Static<typeof ApprovalRequiredSchema>;

/** `POST .../approvals/:approvalId`: the decision on a waiting command. */
export const DecisionBodySchema = Type.Object({ decision: ApprovalDecisionSchema }, { additionalProperties: false });

/** `POST .../tool-calls`: a model's response item, routed to the tool it names. */
export const ToolCallItemSchema = Type.Object(
  {
    type: Type.Optional(Type.String()),
    call_id: Type.Optional(Type.String({ maxLength: 512 })),
    name: Type.Optional(Type.String({ maxLength: 512 })),
    arguments: Type.Optional(Type.Unknown()),
    input: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: true, description: 'A model response item (function_call or custom_tool_call)' },
);
export type ToolCallItem = Static<typeof ToolCallItemSchema>;

/** A tool call's answer, as the item to hand back to the model. */
export const FunctionCallOutputSchema = Type.Object({
  type: Type.Literal('function_call_output'),
  call_id: Type.String(),
  output: Type.String({ description: 'What to send back to the model' }),
  status: Type.Optional(OneOf(['completed', 'rejected', 'failed'])),
  code: Type.Optional(Type.String()),
  result: Type.Optional(ExecResultSchema),
});
export type FunctionCallOutput = Static<typeof FunctionCallOutputSchema>;

/** The path params of `POST /v1/sessions/:id/approvals/:approvalId`. */
export const ApprovalParamsSchema = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 128 }),
  approvalId: Type.String({ minLength: 1, maxLength: 128 }),
});
