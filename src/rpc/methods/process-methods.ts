/** `process/*` methods: Codex's names and fields, plus the marked extensions. */
import { Type } from 'typebox';
import { SIGNAL_NAMES, type SignalName, type SpawnMode } from '../../backends/types.ts';
import { execError } from '../../errors.ts';
import { asProcessId } from '../../ids.ts';
import { isTerminal } from '../../processes/process-state.ts';
import type { StartRequest } from '../../processes/process-table.ts';
import { toPath } from '../../sessions/session-spec.ts';
import type { Connection } from '../connection.ts';
import { defineMethod, type MethodTable } from '../method-table.ts';
import { Base64Schema, Opt, Params, PathSchema, ProcessIdSchema } from '../schemas.ts';
import { narrowingFromCodexSandbox } from './codex-sandbox.ts';

/** Upper bound of argv plus env, like the kernel's ARG_MAX neighbourhood. */
const MAX_ARGV_ENV_BYTES = 2 * 1024 * 1024;
/** Longest a single `process/read` may wait. */
const MAX_WAIT_MS = 300_000;

const EnvMap = Type.Record(Type.String({ minLength: 1, maxLength: 4096 }), Type.String({ maxLength: 131072 }));
const Size = Type.Object({ cols: Type.Integer({ minimum: 1, maximum: 1000 }), rows: Type.Integer({ minimum: 1, maximum: 1000 }) });

const StartSchema = Params({
  processId: ProcessIdSchema,
  argv: Type.Array(Type.String({ maxLength: 131072 }), { maxItems: 4096 }),
  cwd: Opt(PathSchema),
  env: Opt(EnvMap),
  envPolicy: Opt(
    Type.Object({
      inherit: Opt(Type.Union([Type.Literal('all'), Type.Literal('core'), Type.Literal('none')])),
      ignoreDefaultExcludes: Opt(Type.Boolean()),
      exclude: Opt(Type.Array(Type.String({ maxLength: 1024 }), { maxItems: 1024 })),
      set: Opt(EnvMap),
      includeOnly: Opt(Type.Array(Type.String({ maxLength: 1024 }), { maxItems: 1024 })),
    }),
  ),
  tty: Opt(Type.Boolean()),
  pipeStdin: Opt(Type.Boolean()),
  arg0: Opt(Type.String({ maxLength: 4096 })),
  sandbox: Opt(Type.Record(Type.String(), Type.Unknown())),
  metadata: Opt(Type.Unknown()),
  size: Opt(Size),
  timeoutMs: Opt(Type.Integer({ minimum: 1, maximum: 7 * 86_400_000 })),
  sandboxPermissions: Opt(Type.Union([Type.Literal('use-default'), Type.Literal('require-escalated')])),
  approval: Opt(Type.Union([Type.Literal('approved'), Type.Literal('approved-for-session')])),
});

const SignalSchema = Type.Union([Type.Literal('interrupt'), ...SIGNAL_NAMES.map((s) => Type.Literal(s))]);

function bytesOf(argv: readonly string[], env: Record<string, string> | null | undefined): number {
  let n = 0;
  for (const a of argv) n += Buffer.byteLength(a) + 1;
  for (const [k, v] of Object.entries(env ?? {})) n += Buffer.byteLength(k) + Buffer.byteLength(v) + 2;
  return n;
}

export function registerProcessMethods(table: MethodTable<Connection>): void {
  table.add(
    'process/start',
    defineMethod({
      requires: 'initialized',
      schema: StartSchema,
      async handler(p, conn) {
        if (p.argv.length === 0) throw execError('EXEC_ERR_INVALID_PARAMS', 'argv must not be empty', { detail: { field: 'argv' } });
        if (bytesOf(p.argv, p.env) > MAX_ARGV_ENV_BYTES) throw execError('EXEC_ERR_TOO_LARGE', `argv and env exceed ${MAX_ARGV_ENV_BYTES} bytes`);
        const session = conn.session;
        if (session.status.status === 'dead') throw execError('EXEC_ERR_SESSION_DEAD', `session is dead: ${session.status.reason}`);
        const mode: SpawnMode = p.tty ? 'pty' : p.pipeStdin ? 'pipe' : 'pipe-no-stdin';
        // Resolved before the sandbox below: a new client cwd becomes a workspace alias first.
        const cwd = p.cwd ? await session.resolveCwd(toPath(p.cwd)) : undefined;
        // In a linked alias (docker), `pwd` should print the client's path, not the link target.
        const env = cwd !== undefined && session.isLinkedAlias(cwd) && p.env?.['PWD'] === undefined ? { ...p.env, PWD: cwd } : (p.env ?? undefined);
        const req: StartRequest = {
          processId: asProcessId(p.processId),
          argv: p.argv,
          cwd,
          env,
          envPolicy: p.envPolicy
            ? { inherit: p.envPolicy.inherit ?? undefined, ignoreDefaultExcludes: p.envPolicy.ignoreDefaultExcludes ?? undefined, exclude: p.envPolicy.exclude ?? undefined, set: p.envPolicy.set ?? undefined, includeOnly: p.envPolicy.includeOnly ?? undefined }
            : undefined,
          mode,
          arg0: p.arg0 ?? undefined,
          size: p.size ?? undefined,
          timeoutMs: p.timeoutMs ?? undefined,
          sandboxPermissions: p.sandboxPermissions ?? undefined,
          approval: p.approval ?? undefined,
          narrowing: p.sandbox ? narrowingFromCodexSandbox(p.sandbox, session) : undefined,
        };
        const proc = await session.processes.start(req);
        // Codex parses `sandboxType` as its own enum (none | linuxSeccomp | macosSeatbelt...):
        // both of our Linux sandboxes answer `linuxSeccomp` there; `sandbox` names the mechanism.
        return { processId: proc.id, sandboxType: proc.sandboxType === 'none' ? 'none' : 'linuxSeccomp', sandbox: proc.sandboxType };
      },
    }),
  );

  table.add(
    'process/read',
    defineMethod({
      requires: 'initialized',
      schema: Params({ processId: ProcessIdSchema, afterSeq: Opt(Type.Integer({ minimum: 0 })), maxBytes: Opt(Type.Integer({ minimum: 1 })), waitMs: Opt(Type.Integer({ minimum: 0 })) }),
      async handler(p, conn, signal) {
        const table = conn.session.processes;
        const id = asProcessId(p.processId);
        if (table.get(id).state.status === 'starting') throw execError('EXEC_ERR_PROCESS_STARTING', `process id ${id} is starting`);
        const { proc, result } = await table.read(id, {
          afterSeq: p.afterSeq ?? 0,
          maxBytes: p.maxBytes ?? Number.MAX_SAFE_INTEGER,
          waitMs: Math.min(p.waitMs ?? 0, MAX_WAIT_MS),
          signal,
        });
        const state = proc.state;
        const terminal = isTerminal(state);
        return {
          chunks: result.chunks.map((c) => ({ seq: c.seq, stream: c.stream, chunk: c.data.toString('base64') })),
          nextSeq: result.nextSeq,
          exited: terminal,
          exitCode: terminal ? state.exitCode : null,
          closed: proc.log.closed,
          failure: state.status === 'lost' ? state.reason : null,
          sandboxDenied: proc.sandboxDenied,
          terminal: terminal ? state.status : null,
          signal: 'signal' in state ? state.signal : null,
          firstRetainedSeq: result.firstRetainedSeq,
          droppedBytes: result.droppedBytes,
        };
      },
    }),
  );

  table.add(
    'process/write',
    defineMethod({
      requires: 'initialized',
      schema: Params({ processId: ProcessIdSchema, chunk: Base64Schema, writeId: Opt(Type.String({ maxLength: 256 })) }),
      async handler(p, conn) {
        const status = await conn.session.processes.write(asProcessId(p.processId), Buffer.from(p.chunk, 'base64'), p.writeId ?? undefined);
        return { status };
      },
    }),
  );

  table.add(
    'process/signal',
    defineMethod({
      requires: 'initialized',
      schema: Params({ processId: ProcessIdSchema, signal: SignalSchema }),
      async handler(p, conn) {
        const signal: SignalName = p.signal === 'interrupt' ? 'SIGINT' : p.signal;
        await conn.session.processes.signal(asProcessId(p.processId), signal);
        return {};
      },
    }),
  );

  table.add(
    'process/terminate',
    defineMethod({
      requires: 'initialized',
      schema: Params({ processId: ProcessIdSchema }),
      handler: async (p, conn) => ({ running: await conn.session.processes.terminate(asProcessId(p.processId)) }),
    }),
  );

  table.add(
    'process/resize',
    defineMethod({
      requires: 'initialized',
      schema: Params({ processId: ProcessIdSchema, cols: Type.Integer({ minimum: 1, maximum: 1000 }), rows: Type.Integer({ minimum: 1, maximum: 1000 }) }),
      async handler(p, conn) {
        await conn.session.processes.resize(asProcessId(p.processId), { cols: p.cols, rows: p.rows });
        return {};
      },
    }),
  );

  table.add(
    'process/closeStdin',
    defineMethod({
      requires: 'initialized',
      schema: Params({ processId: ProcessIdSchema }),
      async handler(p, conn) {
        await conn.session.processes.closeStdin(asProcessId(p.processId));
        return {};
      },
    }),
  );

  table.add('process/list', defineMethod({ requires: 'initialized', schema: Type.Union([Params({}), Type.Null()]), handler: (_p, conn) => ({ processes: conn.session.processes.list() }) }));
}
