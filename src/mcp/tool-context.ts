/**
 * What an MCP tool call runs with: the tenant of its MCP connection, and the exec-server session
 * that connection works on. A call's session is its `session` argument, else the session bound
 * to the connection (by the `X-Exec-Session` header at initialize, `create_session`, or the
 * first call that names one), else a new session with the server's defaults, bound from then
 * on and deleted with the MCP connection.
 */
import type { CallToolResult, Tool } from '@modelcontextprotocol/sdk/types.js';
import type { StaticEncode, TSchema } from 'typebox';
import { Compile } from 'typebox/compile';
import type { Config } from '../config.ts';
import { execError } from '../errors.ts';
import { readableErrors, type ValidationError } from '../rpc/method-table.ts';
import type { TenantId } from '../ids.ts';
import type { PreviewSigner } from '../preview/signing.ts';
import type { SessionManager } from '../sessions/session-manager.ts';
import type { Session } from '../sessions/session.ts';

export interface ToolContext {
  readonly sessions: SessionManager;
  readonly config: Config;
  readonly tenant: TenantId;
  /** The MCP client's name (`clientInfo.name`): decides the default denial handling. */
  readonly clientName: string | undefined;
  readonly binding: SessionBinding;
  /** Signs preview URLs (`expose_port`). */
  readonly signer: PreviewSigner;
  /** The server's address as the MCP client reached it (scheme and host), for absolute preview URLs. */
  readonly origin: string | undefined;
  /**
   * This call's progress to the client, when it asked for it (`_meta.progressToken`): MCP's
   * `notifications/progress`; `progress` must grow from one call to the next.
   */
  readonly progress?: ((progress: number, total: number | undefined, message: string) => void) | undefined;
  /** This call's `Authorization` header: a fleet's other replicas are asked with the caller's own token. */
  readonly authorization?: string | undefined;
}

/** What a tool is listed with (`tools/list`). */
interface ToolListing<S extends TSchema> {
  readonly name: string;
  readonly title: string;
  readonly description: string;
  readonly schema: S;
  readonly annotations?: Tool['annotations'];
}

/** One MCP tool as it is written: its listing, and its work on arguments its schema accepts. */
export interface ToolDef<S extends TSchema> extends ToolListing<S> {
  run(args: StaticEncode<S>, ctx: ToolContext): Promise<CallToolResult>;
}

/** A tool of the registry: its listing, and its work behind the check of its arguments. */
export interface McpTool extends ToolListing<TSchema> {
  /** Runs the tool; arguments its schema refuses are EXEC_ERR_INVALID_PARAMS (what is wrong, in one line). */
  call(args: unknown, ctx: ToolContext): Promise<CallToolResult>;
}

/** A tool for the registry: its schema, compiled once, checks (and types) the arguments `run` gets. */
export function defineTool<const S extends TSchema>(def: ToolDef<S>): McpTool {
  const check = Compile(def.schema);
  const { run, ...listing } = def;
  return {
    ...listing,
    async call(args, ctx) {
      if (!check.Check(args))
        throw execError('EXEC_ERR_INVALID_PARAMS', `invalid arguments: ${argumentError(check.Errors(args))}`);
      return run(args, ctx);
    },
  };
}

/**
 * What is wrong with a tool's arguments, in one line: a missing field, else an unknown one
 * (TypeBox reports it first as "schema is false" at its path), else the first other error, a
 * union of literals said as the values it allows.
 */
function argumentError(errors: readonly object[]): string {
  const all = readableErrors(errors as readonly ValidationError[]);
  const required = all.find((e) => e.keyword === 'required');
  if (required) return `missing field ${(required.params['requiredProperties'] as string[] | undefined)?.[0] ?? '?'}`;
  const extra = all.find((e) => e.keyword === 'additionalProperties');
  if (extra) return `unknown field ${(extra.params['additionalProperties'] as string[] | undefined)?.[0] ?? '?'}`;
  const first = all.find((e) => e.keyword !== 'boolean' && e.keyword !== 'anyOf') ?? all[0];
  return `${first?.instancePath || 'arguments'} ${first?.message ?? 'is invalid'}`;
}

/** The exec-server session an MCP connection works on, and the ones it created on its own. */
export class SessionBinding {
  sessionId: string | undefined;
  /** Sessions created implicitly for this connection: deleted when it closes. */
  readonly implicit = new Set<string>();
  #creating: Promise<Session> | undefined;

  constructor(sessionId?: string) {
    this.sessionId = sessionId;
  }

  /** The session a call without a `session` argument works on (created once, on first need). */
  current(ctx: ToolContext): Promise<Session> {
    if (this.sessionId !== undefined) return Promise.resolve(ctx.sessions.get(this.sessionId, ctx.tenant));
    this.#creating ??= ctx.sessions.create({}, { tenant: ctx.tenant, clientName: ctx.clientName }).then(
      (session) => {
        this.sessionId ??= session.id;
        this.implicit.add(session.id);
        return session;
      },
      (err: unknown) => {
        this.#creating = undefined;
        throw err;
      },
    );
    return this.#creating;
  }
}

/** The session a call works on (see the module comment). */
export async function sessionOf(ctx: ToolContext, requested: string | undefined): Promise<Session> {
  if (requested === undefined) return ctx.binding.current(ctx);
  const session = ctx.sessions.get(requested, ctx.tenant);
  ctx.binding.sessionId ??= session.id;
  return session;
}

export const SESSION_NOTE = 'Works on the session bound to this connection unless `session` names another.';
