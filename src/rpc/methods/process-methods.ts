/** `process/*` methods: Codex's names and fields, plus the marked extensions. */
import type { SignalName, SpawnMode } from '../../backends/types.ts';
import { execError } from '../../errors.ts';
import { asProcessId } from '../../ids.ts';
import { isTerminal } from '../../processes/process-state.ts';
import type { StartRequest } from '../../processes/process-table.ts';
import { toFieldPath } from '../../protocol/index.ts';
import type { Connection } from '../connection.ts';
import type { MethodTable } from '../method-table.ts';
import { narrowingFromCodexSandbox } from './codex-sandbox.ts';
import { decodeBase64 } from './fs-methods.ts';

/** Upper bound of argv plus env, like the kernel's ARG_MAX neighbourhood. */
const MAX_ARGV_ENV_BYTES = 2 * 1024 * 1024;
/** Longest a single `process/read` may wait. */
const MAX_WAIT_MS = 300_000;

function bytesOf(argv: readonly string[], env: Record<string, string> | null | undefined): number {
  let n = 0;
  for (const a of argv) n += Buffer.byteLength(a) + 1;
  for (const [k, v] of Object.entries(env ?? {})) n += Buffer.byteLength(k) + Buffer.byteLength(v) + 2;
  return n;
}

/** Registers the `process/*` methods on the table. */
export function registerProcessMethods(table: MethodTable<Connection>): void {
  startMethod(table);
  runningMethods(table);
}

/** `process/start`. */
function startMethod(table: MethodTable<Connection>) {
  table.add('process/start', async (p, conn) => {
    if (p.argv.length === 0)
      throw execError('EXEC_ERR_INVALID_PARAMS', 'argv must not be empty', { detail: { field: 'argv' } });
    if (bytesOf(p.argv, p.env) > MAX_ARGV_ENV_BYTES)
      throw execError('EXEC_ERR_TOO_LARGE', `argv and env exceed ${MAX_ARGV_ENV_BYTES} bytes`);
    const session = conn.session;
    session.assertAlive();
    const mode: SpawnMode = p.tty ? 'pty' : p.pipeStdin ? 'pipe' : 'pipe-no-stdin';
    // Resolved before the sandbox below: a new client cwd becomes a workspace alias first.
    const cwd = p.cwd ? await session.resolveCwd(toFieldPath(p.cwd, 'cwd')) : undefined;
    // In a linked alias (docker), `pwd` should print the client's path, not the link target.
    const env =
      cwd !== undefined && session.isLinkedAlias(cwd) && p.env?.['PWD'] === undefined
        ? { ...p.env, PWD: cwd }
        : (p.env ?? undefined);
    const req: StartRequest = {
      processId: asProcessId(p.processId),
      argv: p.argv,
      cwd,
      env,
      envPolicy: p.envPolicy
        ? {
            inherit: p.envPolicy.inherit ?? undefined,
            ignoreDefaultExcludes: p.envPolicy.ignoreDefaultExcludes ?? undefined,
            exclude: p.envPolicy.exclude ?? undefined,
            set: p.envPolicy.set ?? undefined,
            includeOnly: p.envPolicy.includeOnly ?? undefined,
          }
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
    // Codex's enum has no name per Linux mechanism (src/protocol/process.ts).
    return {
      processId: proc.id,
      sandboxType: proc.sandboxType === 'none' ? 'none' : 'linuxSeccomp',
      sandbox: proc.sandboxType,
    };
  });
}

/** Reading, writing, signals, sizes, stdin and the list. */
function runningMethods(table: MethodTable<Connection>) {
  table.add('process/read', async (p, conn, signal) => {
    const table = conn.session.processes;
    const id = asProcessId(p.processId);
    if (table.get(id).state.status === 'starting')
      throw execError('EXEC_ERR_PROCESS_STARTING', `process id ${id} is starting`);
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
  });

  table.add('process/write', async (p, conn) => {
    const status = await conn.session.processes.write(
      asProcessId(p.processId),
      decodeBase64(p.chunk, 'chunk'),
      p.writeId ?? undefined,
    );
    return { status };
  });

  table.add('process/signal', async (p, conn) => {
    const signal: SignalName = p.signal === 'interrupt' ? 'SIGINT' : p.signal;
    await conn.session.processes.signal(asProcessId(p.processId), signal);
    return {};
  });

  table.add('process/terminate', async (p, conn) => ({
    running: await conn.session.processes.terminate(asProcessId(p.processId)),
  }));

  table.add('process/resize', async (p, conn) => {
    await conn.session.processes.resize(asProcessId(p.processId), { cols: p.cols, rows: p.rows });
    return {};
  });

  table.add('process/closeStdin', async (p, conn) => {
    await conn.session.processes.closeStdin(asProcessId(p.processId));
    return {};
  });

  table.add('process/list', (_p, conn) => ({ processes: conn.session.processes.list() }));
}
