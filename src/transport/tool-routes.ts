/**
 * HTTP routes of the tool facade (src/tools/): `exec_command`, `write_stdin`, the approval
 * follow-up, and tool-call routing, on each session's own `unifiedExec`. Registered by
 * `registerHttpApi` in the TypeBox-validated scope.
 */
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { asReply, outcomeReply, ToolRun } from '../tools/approval-queue.ts';
import {
  ApprovalParamsSchema,
  ApprovalRequiredSchema,
  ApprovalSchema,
  DecisionBodySchema,
  ERROR_RESPONSES,
  ExecCommandBodySchema,
  type ExecToolResult,
  ExecResultSchema,
  FunctionCallOutputSchema,
  SessionParamsSchema,
  ToolCallItemSchema,
  WriteStdinBodySchema,
} from '../protocol/index.ts';
import { routeToolCall } from '../tools/tool-calls.ts';

const errors = ERROR_RESPONSES;

export function registerToolRoutes(app: FastifyInstance): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();

  api.post(
    '/v1/sessions/:id/exec_command',
    {
      schema: {
        operationId: 'execCommand',
        tags: ['tools'],
        summary: 'Run a command with Codex unified-exec semantics',
        description: 'Waits up to yield_time_ms; a command still running answers a session_id for write_stdin. 202 when a person must approve first.',
        params: SessionParamsSchema,
        body: ExecCommandBodySchema,
        response: { 200: ExecResultSchema, 202: ApprovalRequiredSchema, ...errors },
      },
    },
    async (request, reply) => {
      const ue = app.sessions.get(request.params.id, request.tenant).unifiedExec;
      const run = new ToolRun<ExecToolResult>(undefined).start((r) => asReply(() => ue.execCommand(request.body, r)));
      const out = outcomeReply(await run.nextOutcome(), undefined);
      return reply.code(out.statusCode).send(out.body);
    },
  );

  api.post(
    '/v1/sessions/:id/write_stdin',
    {
      schema: {
        operationId: 'writeStdin',
        tags: ['tools'],
        summary: 'Write to (or, with empty chars, poll) a running exec_command process',
        params: SessionParamsSchema,
        body: WriteStdinBodySchema,
        response: { 200: ExecResultSchema, 202: ApprovalRequiredSchema, ...errors },
      },
    },
    async (request, reply) => {
      const ue = app.sessions.get(request.params.id, request.tenant).unifiedExec;
      const run = new ToolRun<ExecToolResult>(undefined).start((r) => asReply(() => ue.writeStdin(request.body, r)));
      const out = outcomeReply(await run.nextOutcome(), undefined);
      return reply.code(out.statusCode).send(out.body);
    },
  );

  api.get(
    '/v1/sessions/:id/approvals',
    {
      schema: {
        operationId: 'listApprovals',
        tags: ['tools'],
        summary: 'Approvals waiting for a decision (HTTP tool calls)',
        params: SessionParamsSchema,
        response: { 200: Type.Object({ approvals: Type.Array(ApprovalSchema) }), ...errors },
      },
    },
    async (request) => {
      const ue = app.sessions.get(request.params.id, request.tenant).unifiedExec;
      return {
        approvals: ue.approvals.list().map((a) => ({ id: a.id, purpose: a.request.purpose, reason: a.request.reason, argv: [...a.request.argv], cwd: a.request.cwd, createdAt: a.createdAt, expiresAt: a.expiresAt })),
      };
    },
  );

  api.post(
    '/v1/sessions/:id/approvals/:approvalId',
    {
      schema: {
        operationId: 'decideApproval',
        tags: ['tools'],
        summary: 'Decide a pending approval; answers the original call\'s result (or the next approval)',
        params: ApprovalParamsSchema,
        body: DecisionBodySchema,
        response: { 200: Type.Union([ExecResultSchema, FunctionCallOutputSchema]), 202: ApprovalRequiredSchema, ...errors },
      },
    },
    async (request, reply) => {
      const ue = app.sessions.get(request.params.id, request.tenant).unifiedExec;
      const pending = ue.approvals.decide(request.params.approvalId, request.body.decision);
      const out = outcomeReply(await pending.run.nextOutcome(), pending.run.callId);
      return reply.code(out.statusCode).send(out.body);
    },
  );

  api.post(
    '/v1/sessions/:id/tool-calls',
    {
      schema: {
        operationId: 'toolCall',
        tags: ['tools'],
        summary: 'Route a model response item (function_call / custom_tool_call) to its tool',
        description: '204: not a tool item. 200: a function_call_output for the model. 202: approval required. 400 EXEC_ERR_TOOL_PAYLOAD is fatal for the harness.',
        params: SessionParamsSchema,
        body: ToolCallItemSchema,
        response: { 200: FunctionCallOutputSchema, 202: ApprovalRequiredSchema, 204: Type.Null({ description: 'Not a tool call: ignored' }), ...errors },
      },
    },
    async (request, reply) => {
      const session = app.sessions.get(request.params.id, request.tenant);
      const decision = routeToolCall(request.body, () => session.unifiedExec);
      if (decision.kind === 'ignore') return reply.code(204).send(null);
      const out = decision.kind === 'reply' ? decision.reply : outcomeReply(await decision.run.nextOutcome(), decision.run.callId);
      return reply.code(out.statusCode).send(out.body);
    },
  );
}
