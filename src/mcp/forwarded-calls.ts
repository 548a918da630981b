/**
 * MCP tool calls in a fleet (docs/architecture.md, "Fleet"). An MCP connection lives on one
 * replica, but a call may name a session (its `session` argument, or the connection's bound
 * session) that another live replica owns. Such a call runs on the owner: the replica holding
 * the connection posts it to `POST /v1/sessions/{id}/mcp-call` there, with the MCP client's own
 * token, and the owner answers the tool's result as it would to a connection of its own. The
 * route is between replicas (hidden from the API document) and takes tenant tokens only.
 */
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { validatorCompiler } from '../transport/validator.ts';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { FastifyInstance } from 'fastify';
import type { Config } from '../config.ts';
import { ERROR_REGISTRY, type ErrorCode, execError, toExecError } from '../errors.ts';
import type { PreviewSigner } from '../preview/signing.ts';
import { CLIENT_HEADER } from '../transport/client-address.ts';
import { FORWARDED_HEADER } from '../transport/fleet-forward.ts';
import { originOf } from '../transport/origin.ts';
import { errorResult } from './results.ts';
import { type ForwardedCall, ForwardedCallSchema } from './schemas.ts';
import { SessionBinding, type ToolContext } from './tool-context.ts';
import { MCP_CALL_SUFFIX, SessionParamsSchema } from '../protocol/index.ts';

/** Tools that work on no existing session: always run on the replica holding the connection. */
const SESSIONLESS: ReadonlySet<string> = new Set(['create_session', 'list_sessions']);

/** What a forwarded call needs of the MCP request that made it. */
export interface CallOrigin {
  /** Ends when the MCP client gives up on the call. */
  readonly signal: AbortSignal | undefined;
  /** The client's address, stamped for the owner's audit log (client-address.ts). */
  readonly client: string | undefined;
}

/** The session a call works on, when it names one or the connection has one bound. */
function targetOf(name: string, args: unknown, ctx: ToolContext): string | undefined {
  if (SESSIONLESS.has(name)) return undefined;
  const named = typeof args === 'object' && args !== null ? (args as { session?: unknown }).session : undefined;
  return typeof named === 'string' ? named : ctx.binding.sessionId;
}

/**
 * Runs tool `name` on the replica that owns its session, if another live replica does; undefined
 * when the call is this replica's to run (its session is here, is taken over here, or is nowhere:
 * the tool itself then says so).
 */
export async function callOnOwner(
  name: string,
  args: unknown,
  ctx: ToolContext,
  from: CallOrigin,
): Promise<CallToolResult | undefined> {
  const id = targetOf(name, args, ctx);
  if (ctx.sessions.backend.fleet === undefined || id === undefined || ctx.sessions.find(id) !== undefined)
    return undefined;
  const body: ForwardedCall = {
    name,
    ...(args !== undefined ? { arguments: args as Record<string, unknown> } : {}),
    ...(ctx.clientName !== undefined ? { clientName: ctx.clientName } : {}),
    ...(ctx.origin !== undefined ? { origin: ctx.origin } : {}),
  };
  try {
    let route = await ctx.sessions.route(id, ctx.tenant);
    for (let hop = 0; route.kind === 'remote' && hop < 3; hop++) {
      const answer = await post(
        route.url,
        id,
        body,
        { ...from, authorization: ctx.authorization },
        ctx.sessions.backend.fleet.replicaId,
      );
      if (answer !== 'unreachable') {
        // As a call served here binds the session it names to a connection that has none.
        if (answer.isError !== true) ctx.binding.sessionId ??= id;
        return answer;
      }
      route = await ctx.sessions.rerouteAfterFailure(id, ctx.tenant, route.url);
    }
    if (route.kind === 'remote')
      throw execError('EXEC_ERR_BACKEND_UNAVAILABLE', `the replica ${route.replicaId} does not answer`);
    return undefined;
  } catch (err) {
    return errorResult(name, err);
  }
}

/** Whether a failed request never reached the replica (so it may go elsewhere without running twice). */
function neverSent(err: unknown): boolean {
  const code = (err as { cause?: { code?: unknown } }).cause?.code;
  return code === 'ECONNREFUSED' || code === 'EHOSTUNREACH' || code === 'ENETUNREACH';
}

/** Posts the call to the owner at `base`: its result, or 'unreachable' when nothing was sent. */
async function post(
  base: string,
  id: string,
  body: ForwardedCall,
  from: CallOrigin & { readonly authorization: string | undefined },
  replicaId: string,
): Promise<CallToolResult | 'unreachable'> {
  const headers: Record<string, string> = { 'content-type': 'application/json', [FORWARDED_HEADER]: replicaId };
  if (from.authorization !== undefined) headers.authorization = from.authorization;
  if (from.client !== undefined) headers[CLIENT_HEADER] = from.client;
  let res: Response;
  try {
    res = await fetch(new URL(`/v1/sessions/${encodeURIComponent(id)}${MCP_CALL_SUFFIX}`, base), {
      method: 'POST',
      headers,
      body: JSON.stringify(body),
      ...(from.signal !== undefined ? { signal: from.signal } : {}),
    });
  } catch (err) {
    if (neverSent(err)) return 'unreachable';
    const why = `the replica serving session ${id} failed: ${toExecError(err).message}`;
    throw execError('EXEC_ERR_BACKEND_UNAVAILABLE', why, { cause: err });
  }
  const answer = (await res.json().catch(() => undefined)) as { code?: unknown; message?: unknown } | undefined;
  if (res.ok && answer !== undefined) return answer as CallToolResult;
  const code =
    typeof answer?.code === 'string' && answer.code in ERROR_REGISTRY ? (answer.code as ErrorCode) : undefined;
  throw execError(
    code ?? 'EXEC_ERR_BACKEND_UNAVAILABLE',
    typeof answer?.message === 'string' ? answer.message : `the replica serving session ${id} answered ${res.status}`,
  );
}

/** The owner's side: `POST /v1/sessions/{id}/mcp-call` runs the call on session `id`, here. */
export async function registerForwardedCalls(
  app: FastifyInstance,
  opts: { config: Config; signer: PreviewSigner },
): Promise<void> {
  await app.register(async (scope) => {
    scope.setValidatorCompiler(validatorCompiler);
    scope
      .withTypeProvider<TypeBoxTypeProvider>()
      .post(
        `/v1/sessions/:id${MCP_CALL_SUFFIX}`,
        { schema: { hide: true, params: SessionParamsSchema, body: ForwardedCallSchema } },
        async (request) => {
          const session = app.sessions.get(request.params.id, request.tenant);
          // Loaded with the first call, as the MCP endpoint loads its own (endpoint.ts).
          const { callTool } = await import('./tools.ts');
          const { name, arguments: args, clientName, origin } = request.body;
          const result = await callTool(name, args, {
            sessions: app.sessions,
            config: opts.config,
            tenant: request.tenant,
            clientName,
            binding: new SessionBinding(session.id),
            signer: opts.signer,
            origin: origin ?? originOf(request.raw),
            authorization: request.headers.authorization,
          });
          if (result === undefined) throw execError('EXEC_ERR_INVALID_PARAMS', `unknown tool ${JSON.stringify(name)}`);
          return result;
        },
      );
  });
}
