/**
 * HTTP routes of the tool facade (src/tools/): `exec_command`, `write_stdin`, the approval
 * follow-up, and tool-call routing, on each session's own `unifiedExec`. Registered by
 * `registerHttpApi` in the TypeBox-validated scope.
 */
import type { FastifyInstance, FastifyRequest, RawServerDefault, RouteGenericInterface } from 'fastify';
import type { IncomingMessage } from 'node:http';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type, type TSchema } from 'typebox';
import { outcomeReply, runFacadeCall, type ToolRun } from '../tools/approval-queue.ts';
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
import type { TypedApi } from './typed-api.ts';
import { routeToolCall } from '../tools/tool-calls.ts';
import type { UnifiedExec } from '../tools/unified-exec.ts';

const errors = ERROR_RESPONSES;

/** The body of a request whose schema's `body` is `S`, as the route's handler sees it. */
type BodyOf<S extends TSchema> = FastifyRequest<
  RouteGenericInterface,
  RawServerDefault,
  IncomingMessage,
  { body: S },
  TypeBoxTypeProvider
>['body'];

/** `exec_command` and `write_stdin`: the call on the session's unified exec; its result, or 202 and an approval a person must give first. */
function facadeRoute<S extends TSchema>(
  app: FastifyInstance,
  api: TypedApi,
  tool: string,
  doc: { readonly operationId: string; readonly summary: string; readonly description?: string },
  body: S,
  work: (ue: UnifiedExec, body: BodyOf<S>, run: ToolRun<ExecToolResult>) => Promise<ExecToolResult>,
): void {
  api.post(
    `/v1/sessions/:id/${tool}`,
    {
      schema: {
        ...doc,
        tags: ['tools'],
        params: SessionParamsSchema,
        body,
        response: { 200: ExecResultSchema, 202: ApprovalRequiredSchema, ...errors },
      },
    },
    async (request, reply) => {
      const ue = app.sessions.get(request.params.id, request.tenant).unifiedExec;
      const out = outcomeReply(await runFacadeCall((r) => work(ue, request.body, r)), undefined);
      return reply.code(out.statusCode).send(out.body);
    },
  );
}

/** Registers the HTTP tool facade: `exec_command`, `write_stdin`, approvals and tool calls. */
export function registerToolRoutes(app: FastifyInstance): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  facadeRoutes(app, api);
  decisionRoutes(app, api);
}

/** The unified-exec facade (`exec_command`, `write_stdin`) and the pending approvals it asks for. */
function facadeRoutes(app: FastifyInstance, api: TypedApi) {
  facadeRoute(
    app,
    api,
    'exec_command',
    {
      operationId: 'execCommand',
      summary: 'Run a command with Codex unified-exec semantics',
      description:
        'Waits up to yield_time_ms; a command still running answers a session_id for write_stdin. 202 when a person must approve first.',
    },
    ExecCommandBodySchema,
    (ue, body, r) => ue.execCommand(body, r),
  );
  facadeRoute(
    app,
    api,
    'write_stdin',
    { operationId: 'writeStdin', summary: 'Write to (or, with empty chars, poll) a running exec_command process' },
    WriteStdinBodySchema,
    (ue, body, r) => ue.writeStdin(body, r),
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
        approvals: ue.approvals.list().map((a) => ({
          id: a.id,
          purpose: a.request.purpose,
          reason: a.request.reason,
          argv: [...a.request.argv],
          cwd: a.request.cwd,
          createdAt: a.createdAt,
          expiresAt: a.expiresAt,
        })),
      };
    },
  );
}

/** Deciding an approval, and tool calls as the Responses API hands them over. */
function decisionRoutes(app: FastifyInstance, api: TypedApi) {
  api.post(
    '/v1/sessions/:id/approvals/:approvalId',
    {
      schema: {
        operationId: 'decideApproval',
        tags: ['tools'],
        summary: "Decide a pending approval; answers the original call's result (or the next approval)",
        params: ApprovalParamsSchema,
        body: DecisionBodySchema,
        response: {
          200: Type.Union([ExecResultSchema, FunctionCallOutputSchema]),
          202: ApprovalRequiredSchema,
          ...errors,
        },
      },
    },
    async (request, reply) => {
      const session = app.sessions.get(request.params.id, request.tenant);
      const pending = session.unifiedExec.approvals.decide(request.params.approvalId, request.body.decision);
      // Who decided (the `approval` line carries the caller that started the command).
      session.audit({
        action: 'approval.decide',
        detail: { approvalId: request.params.approvalId, decision: request.body.decision },
      });
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
        description:
          '204: not a tool item. 200: a function_call_output for the model. 202: approval required. 400 EXEC_ERR_TOOL_PAYLOAD is fatal for the harness.',
        params: SessionParamsSchema,
        body: ToolCallItemSchema,
        response: {
          200: FunctionCallOutputSchema,
          202: ApprovalRequiredSchema,
          204: Type.Null({ description: 'Not a tool call: ignored' }),
          ...errors,
        },
      },
    },
    async (request, reply) => {
      const session = app.sessions.get(request.params.id, request.tenant);
      const decision = routeToolCall(request.body, () => session.unifiedExec);
      if (decision.kind === 'ignore') return reply.code(204).send(null);
      const out =
        decision.kind === 'reply'
          ? decision.reply
          : outcomeReply(await decision.run.nextOutcome(), decision.run.callId);
      return reply.code(out.statusCode).send(out.body);
    },
  );
}
