/**
 * The MCP tools and their dispatch. `exec_command`, `write_stdin` and `decide_approval` run
 * through the HTTP facade's own code (`UnifiedExec`, `ToolRun`, the session's approval queue),
 * so semantics, truncation and output format are the facade's; the file tools are in
 * file-tools.ts; which session a call works on is tool-context.ts's business.
 */
import type { CallToolResult, Tool } from '@modelcontextprotocol/sdk/types.js';
import type { TSchema } from 'typebox';
import type { SessionSpec } from '../sessions/session-spec.ts';
import { runFacadeCall, type ToolRun } from '../tools/approval-queue.ts';
import { describeImagePull, type ExecToolResult, type ImagePull } from '../protocol/index.ts';
import { previewAnswer } from '../preview/routes.ts';
import type { UnifiedExec } from '../tools/unified-exec.ts';
import { fleetSessionInfos } from '../transport/fleet-list.ts';
import { listDirTool, readFileTool, writeFileTool } from './file-tools.ts';
import { errorResult, outcomeResult, textResult } from './results.ts';
import {
  CreateSessionArgsSchema,
  DecideApprovalArgsSchema,
  ExecCommandArgsSchema,
  ExposePortArgsSchema,
  ForkSessionArgsSchema,
  jsonSchema,
  ListSessionsArgsSchema,
  SnapshotSessionArgsSchema,
  WriteStdinArgsSchema,
  type CreateSessionToolArgs,
  type DecideApprovalToolArgs,
  type ExposePortToolArgs,
  type ForkSessionToolArgs,
  type SnapshotSessionToolArgs,
} from './schemas.ts';
import { defineTool, SESSION_NOTE, sessionOf, type McpTool, type ToolContext, type ToolDef } from './tool-context.ts';

/** Runs facade work on the call's session as the HTTP routes do: its result, or first an approval a person must give. */
async function runFacade(
  ctx: ToolContext,
  tool: string,
  requested: string | undefined,
  work: (ue: UnifiedExec, run: ToolRun<ExecToolResult>) => Promise<ExecToolResult>,
): Promise<CallToolResult> {
  const session = await sessionOf(ctx, requested);
  const outcome = await runFacadeCall((r) => work(session.unifiedExec, r));
  return outcomeResult(tool, outcome, session.spec.policy.approvalPolicy);
}

/** A facade tool (exec_command, write_stdin): listed with the hints of a command that changes things, run by `runFacade`. */
function facadeTool<const S extends TSchema>(
  listing: { name: string; title: string; description: string; schema: S },
  run: ToolDef<S>['run'],
): McpTool {
  return defineTool({ ...listing, annotations: { destructiveHint: true, openWorldHint: true }, run });
}

const execCommandTool = facadeTool(
  {
    name: 'exec_command',
    title: 'Run a command',
    description: `Runs a shell command in the session (Codex unified exec). Waits up to yield_time_ms for it to finish; a command still running then answers a session_id to pass to write_stdin. Output is middle-truncated to max_output_tokens. ${SESSION_NOTE}`,
    schema: ExecCommandArgsSchema,
  },
  ({ session, ...body }, ctx) => runFacade(ctx, 'exec_command', session, (ue, r) => ue.execCommand(body, r)),
);

const writeStdinTool = facadeTool(
  {
    name: 'write_stdin',
    title: 'Write to or poll a running command',
    description: `Writes chars to a command exec_command left running (tty=true keeps stdin open), or with empty chars waits for more output. session_id is the number exec_command answered. ${SESSION_NOTE}`,
    schema: WriteStdinArgsSchema,
  },
  ({ session, ...body }, ctx) => runFacade(ctx, 'write_stdin', session, (ue, r) => ue.writeStdin(body, r)),
);

const decideApprovalTool = defineTool({
  name: 'decide_approval',
  title: 'Answer an approval',
  description: `Answers an approval that an exec_command or write_stdin result asked for (approval_required) with the user's decision; answers with that command's result. ${SESSION_NOTE}`,
  schema: DecideApprovalArgsSchema,
  async run(args: DecideApprovalToolArgs, ctx) {
    const session = await sessionOf(ctx, args.session);
    const pending = session.unifiedExec.approvals.decide(args.approval_id, args.decision);
    return outcomeResult('decide_approval', await pending.run.nextOutcome(), session.spec.policy.approvalPolicy);
  },
});

/** A session image's pull as MCP progress: bytes as the figure (it never goes back), in words as the message. */
function pullProgress(progress: NonNullable<ToolContext['progress']>): (pull: ImagePull) => void {
  let last = -1;
  return (p) => {
    // The figure must grow between notifications: an update with the same bytes waits for more.
    if (p.currentBytes <= last && p.phase === 'pulling') return;
    last = Math.max(last + 1, p.currentBytes);
    const verb = p.phase === 'pulled' ? 'pulled' : p.phase === 'failed' ? 'could not pull' : 'pulling';
    progress(
      last,
      p.totalBytes > 0 ? Math.max(p.totalBytes, last) : undefined,
      `${verb} image ${p.image}: ${describeImagePull(p)}`,
    );
  };
}

const createSessionTool = defineTool({
  name: 'create_session',
  title: 'Create a session',
  description:
    'Creates an exec-server session (a container on the docker backend) from the session spec: image, sandbox, approvalPolicy, env... Unless bind is false it becomes the session of this MCP connection. It lives until deleted or reaped (idle timeout).',
  schema: CreateSessionArgsSchema,
  annotations: { openWorldHint: true },
  async run(args: CreateSessionToolArgs, ctx) {
    const { bind, count, ...spec } = args;
    const options = {
      tenant: ctx.tenant,
      clientName: ctx.clientName,
      onImagePull: ctx.progress && pullProgress(ctx.progress),
    };
    if (count !== undefined && count > 1) {
      const infos = (await ctx.sessions.createMany(spec as SessionSpec, count, options)).map((s) => s.info());
      return textResult(`created ${count} sessions: ${infos.map((i) => i.sessionId).join(' ')}`, { sessions: infos });
    }
    const session = await ctx.sessions.create(spec as SessionSpec, options);
    if (bind !== false) ctx.binding.sessionId = session.id;
    const info = session.info();
    return textResult(
      `created session ${session.id}${bind !== false ? ' (bound to this connection)' : ''}\n${JSON.stringify(info, null, 2)}`,
      { ...info },
    );
  },
});

const listSessionsTool = defineTool({
  name: 'list_sessions',
  title: 'List sessions',
  description: "Lists this tenant's exec-server sessions (of every replica, in a fleet); the bound one is marked.",
  schema: ListSessionsArgsSchema,
  annotations: { readOnlyHint: true },
  async run(_args: Record<string, never>, ctx) {
    // In a fleet, every replica's sessions of the tenant, as `GET /v1/sessions` lists them.
    const ask = { sessions: ctx.sessions, query: '', authorization: ctx.authorization };
    const infos =
      (await fleetSessionInfos(ask, ctx.tenant, async ({ session }) => session.info())) ??
      ctx.sessions.list(ctx.tenant).map((s) => s.info());
    const lines = infos.map(
      (i) =>
        `${i.sessionId}${i.sessionId === ctx.binding.sessionId ? ' (bound)' : ''} ${i.status} backend=${i.backend} sandbox=${i.sandbox.type} workdir=${i.workdir} running=${i.runningProcesses} processes=${i.processes}`,
    );
    return textResult(infos.length === 0 ? 'no sessions' : lines.join('\n'), {
      boundSession: ctx.binding.sessionId ?? null,
      sessions: infos,
    });
  },
});

const snapshotSessionTool = defineTool({
  name: 'snapshot_session',
  title: 'Snapshot a session',
  description: `Commits the session's filesystem to a snapshot image that create_session can start from ("snapshot"). Docker backend. ${SESSION_NOTE}`,
  schema: SnapshotSessionArgsSchema,
  async run(args: SnapshotSessionToolArgs, ctx) {
    const session = await sessionOf(ctx, args.session);
    const snapshot = await session.snapshot(args.name);
    return textResult(`snapshot ${snapshot.snapshotId} of session ${session.id}`, { ...snapshot });
  },
});

const forkSessionTool = defineTool({
  name: 'fork_session',
  title: 'Fork a session',
  description: `Makes count new sessions from a snapshot of the session (best-of-N, tree search); with memory (gVisor) every running process goes on in each fork. Docker backend. The bound session stays bound. ${SESSION_NOTE}`,
  schema: ForkSessionArgsSchema,
  async run(args: ForkSessionToolArgs, ctx) {
    const session = await sessionOf(ctx, args.session);
    const forked = await ctx.sessions.fork(session, {
      count: args.count ?? 1,
      memory: args.memory === true,
      name: undefined,
    });
    const infos = forked.sessions.map((s) => s.info());
    return textResult(
      `forked session ${session.id} into ${infos.map((i) => i.sessionId).join(', ')} (snapshot ${forked.snapshot.snapshotId})`,
      { snapshot: { ...forked.snapshot }, sessions: infos },
    );
  },
});

const exposePortTool = defineTool({
  name: 'expose_port',
  title: 'Open a preview URL',
  description: `Gives a server listening on a port in the session a URL a person can open in a browser (HTTP and WebSocket), valid for ttl_seconds. Needs a session created with "previewPorts": true. ${SESSION_NOTE}`,
  schema: ExposePortArgsSchema,
  annotations: { openWorldHint: true },
  async run(args: ExposePortToolArgs, ctx) {
    const session = await sessionOf(ctx, args.session);
    const answer = previewAnswer(
      session,
      await session.ports.expose(args.port),
      ctx.signer,
      ctx.config,
      args.ttl_seconds,
    );
    const url = ctx.origin === undefined ? answer.signedPath : `${ctx.origin}${answer.signedPath}`;
    return textResult(
      `port ${args.port} of session ${session.id}: ${url}\n(valid until ${answer.expiresAt}; nothing needs to listen yet, the URL answers 502 until something does)`,
      { ...answer, url },
    );
  },
});

const TOOLS: readonly McpTool[] = [
  execCommandTool,
  writeStdinTool,
  decideApprovalTool,
  readFileTool,
  writeFileTool,
  listDirTool,
  createSessionTool,
  listSessionsTool,
  snapshotSessionTool,
  forkSessionTool,
  exposePortTool,
];

const byName = new Map(TOOLS.map((t) => [t.name, t]));

/** The tool listing (`tools/list`). */
export function toolList(): Tool[] {
  return TOOLS.map((t) => ({
    name: t.name,
    title: t.title,
    description: t.description,
    inputSchema: jsonSchema(t.schema),
    ...(t.annotations ? { annotations: t.annotations } : {}),
  }));
}

/** Runs a tool; undefined when there is no tool of that name (a protocol error for the caller). */
export async function callTool(name: string, args: unknown, ctx: ToolContext): Promise<CallToolResult | undefined> {
  const tool = byName.get(name);
  if (!tool) return undefined;
  try {
    return await tool.call(args ?? {}, ctx);
  } catch (err) {
    return errorResult(name, err);
  }
}
