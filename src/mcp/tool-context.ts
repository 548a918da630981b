/**
 * What an MCP tool call runs with: the tenant of its MCP connection, and the exec-server session
 * that connection works on. A call's session is its `session` argument, else the session bound
 * to the connection (by the `X-Exec-Session` header at initialize, `create_session`, or the
 * first call that names one), else a new session with the server's defaults, bound from then
 * on and deleted with the MCP connection.
 */
import type { CallToolResult, Tool } from '@modelcontextprotocol/sdk/types.js';
import type { TSchema } from 'typebox';
import type { Config } from '../config.ts';
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
}

/** One MCP tool: its listing and its work. `run` gets arguments already checked against `schema`. */
export interface ToolDef<A> {
  readonly name: string;
  readonly title: string;
  readonly description: string;
  readonly schema: TSchema;
  readonly annotations?: Tool['annotations'];
  run(args: A, ctx: ToolContext): Promise<CallToolResult>;
}

/** Erases a tool's argument type for the registry (its schema checks the arguments first). */
export function defineTool<A>(def: ToolDef<A>): ToolDef<never> {
  return def as unknown as ToolDef<never>;
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
