/**
 * Routing of a model response item (docs/protocol.md, "HTTP API"), as Codex's tool router does it:
 * a non-tool item is ignored; an item without `call_id` or `name` is refused; an unknown tool
 * and bad arguments are answered to the model; a payload kind the tool does not take is fatal
 * for the harness (`EXEC_ERR_TOOL_PAYLOAD`); a command the policy forbids is rejected (the
 * model is told why); an approval that needs a person is `approval_required`; otherwise the
 * tool runs and the answer is a `function_call_output` carrying the `call_id`.
 */
import { Compile } from 'typebox/compile';
import { execError, httpErrorBody, toExecError, type ExecServerError } from '../errors.ts';
import { ToolRun, type ToolReply } from './approval-queue.ts';
import {
  ExecCommandBodySchema,
  WriteStdinBodySchema,
  type ExecCommandArgs,
  type ExecToolResult,
  type FunctionCallOutput,
  type WriteStdinArgs,
} from '../protocol/index.ts';
import type { UnifiedExec } from './unified-exec.ts';

/** Item types that carry a tool call. */
const TOOL_ITEM_TYPES = new Set(['function_call', 'custom_tool_call']);

/** Tools this server runs, and the payload kind each takes. */
const TOOLS = { exec_command: 'function_call', write_stdin: 'function_call' } as const;
type ToolName = keyof typeof TOOLS;

const checkExec = Compile(ExecCommandBodySchema);
const checkWrite = Compile(WriteStdinBodySchema);

type Reply = ToolReply<FunctionCallOutput>;

export type RouteDecision =
  | { readonly kind: 'ignore' }
  | { readonly kind: 'reply'; readonly reply: Reply }
  | { readonly kind: 'run'; readonly run: ToolRun<FunctionCallOutput> };

/** A 200 with the `function_call_output` item to hand back to the model. */
export function functionCallOutput(callId: string, output: string, extra: Partial<FunctionCallOutput> = {}): Reply {
  return { statusCode: 200, body: { type: 'function_call_output', call_id: callId, output, ...extra } };
}

function parseArguments(raw: unknown): { ok: true; value: unknown } | { ok: false; message: string } {
  if (raw === undefined || raw === null || raw === '') return { ok: true, value: {} };
  if (typeof raw !== 'string') return { ok: true, value: raw };
  try {
    return { ok: true, value: JSON.parse(raw) };
  } catch (err) {
    return { ok: false, message: (err as Error).message };
  }
}

function argumentError(check: typeof checkExec | typeof checkWrite, value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'expected a JSON object';
  if (check.Check(value)) return undefined;
  const first = check.Errors(value)[0] as
    | { keyword?: string; instancePath?: string; message?: string; params?: { requiredProperties?: string[] } }
    | undefined;
  if (first?.keyword === 'required') return `missing field \`${first.params?.requiredProperties?.[0] ?? '?'}\``;
  return `${first?.instancePath || 'arguments'} ${first?.message ?? 'is invalid'}`;
}

/** A tool call item the harness must fix: an error answer, carrying the call's id when it had one. */
function refused(err: ExecServerError, callId: string | undefined): Reply {
  return { statusCode: err.statusCode, body: httpErrorBody(err, callId === undefined ? {} : { call_id: callId }) };
}

function completed(callId: string, result: ExecToolResult): Reply {
  return functionCallOutput(callId, result.text, { status: 'completed', result });
}

/** What to do with a model's response item: ignore it, answer at once, or run the tool it names. */
export function routeToolCall(item: Record<string, unknown>, unifiedExec: () => UnifiedExec): RouteDecision {
  if (typeof item['type'] !== 'string' || !TOOL_ITEM_TYPES.has(item['type'])) return { kind: 'ignore' };
  const callId = item['call_id'];
  const name = item['name'];
  if (typeof callId !== 'string' || callId === '' || typeof name !== 'string' || name === '') {
    const missing = typeof callId !== 'string' || callId === '' ? 'call_id' : 'name';
    return {
      kind: 'reply',
      reply: refused(
        execError('EXEC_ERR_INVALID_PARAMS', `tool call item has no ${missing}`),
        typeof callId === 'string' && callId !== '' ? callId : undefined,
      ),
    };
  }
  if (!Object.hasOwn(TOOLS, name))
    return { kind: 'reply', reply: functionCallOutput(callId, `unsupported call: ${name}`, { status: 'failed' }) };
  const tool = name as ToolName;
  if (item['type'] !== TOOLS[tool]) {
    return {
      kind: 'reply',
      reply: refused(
        execError(
          'EXEC_ERR_TOOL_PAYLOAD',
          `tool "${tool}" invoked with incompatible payload (${String(item['type'])})`,
        ),
        callId,
      ),
    };
  }
  const parsed = parseArguments(item['arguments']);
  if (!parsed.ok)
    return {
      kind: 'reply',
      reply: functionCallOutput(callId, `failed to parse function arguments: ${parsed.message}`, { status: 'failed' }),
    };
  const invalid = argumentError(tool === 'exec_command' ? checkExec : checkWrite, parsed.value);
  if (invalid !== undefined)
    return {
      kind: 'reply',
      reply: functionCallOutput(callId, `failed to parse function arguments: ${invalid}`, { status: 'failed' }),
    };
  const ue = unifiedExec();
  const run = new ToolRun<FunctionCallOutput>(callId).start(async (r) => {
    try {
      if (tool === 'exec_command') return completed(callId, await ue.execCommand(parsed.value as ExecCommandArgs, r));
      return completed(callId, await ue.writeStdin(parsed.value as WriteStdinArgs, r));
    } catch (err) {
      const e = toExecError(err);
      if (e.code === 'EXEC_ERR_REJECTED')
        return functionCallOutput(callId, e.message, { status: 'rejected', code: e.code });
      const text =
        tool === 'exec_command'
          ? `exec_command failed for \`${(parsed.value as ExecCommandArgs).cmd}\`: ${e.message}`
          : `write_stdin failed: ${e.message}`;
      return functionCallOutput(callId, text, { status: 'failed', code: e.code });
    }
  });
  return { kind: 'run', run };
}
