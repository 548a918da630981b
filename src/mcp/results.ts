/**
 * What a model reads back from an MCP tool call. Command results carry the same text block the
 * HTTP facade answers (`text`, Codex's format) and its JSON as `structuredContent`; a sandbox
 * denial says what happened and what the model may do about it; an approval that needs a person
 * says exactly how to answer it (`decide_approval`). Failures are tool errors (`isError`) whose
 * text names the stable `EXEC_ERR_*` code, never protocol errors the model cannot see.
 */
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { httpErrorBody, toExecError } from '../errors.ts';
import type { ApprovalPolicy } from '../policy/sandbox-policy.ts';
import { approvalRequiredBody, type RunOutcome } from '../tools/approval-queue.ts';
import type { ExecToolResult } from '../protocol/index.ts';

/** A tool result a model reads as text, with its JSON as `structuredContent` when given. */
export function textResult(text: string, structured?: Record<string, unknown>): CallToolResult {
  return { content: [{ type: 'text', text }], ...(structured ? { structuredContent: structured } : {}) };
}

/** A failed tool call as a tool error naming its `EXEC_ERR_*` code (a model never sees protocol errors). */
export function errorResult(tool: string, err: unknown): CallToolResult {
  const e = toExecError(err);
  return {
    content: [{ type: 'text', text: `${tool} failed: ${e.message} (${e.code})` }],
    structuredContent: httpErrorBody(e),
    isError: true,
  };
}

function denialNote(result: ExecToolResult, policy: ApprovalPolicy): string {
  const canEscalate = policy === 'on-request' || typeof policy !== 'string';
  const how = canEscalate
    ? 'If the command really needs to write outside the writable roots or use the network, call exec_command again with "sandbox_permissions": "require_escalated" and a "justification"; the user is asked to approve.'
    : `The session's approval policy (${typeof policy === 'string' ? policy : 'granular'}) does not allow running it without the sandbox; work inside the writable roots instead.`;
  return `The sandbox denied this command (exit code ${result.exit_code ?? 'unknown'}): it tried something the session's sandbox does not allow. ${how}`;
}

/** An `exec_command` / `write_stdin` result as the model sees it. */
export function execResult(result: ExecToolResult, policy: ApprovalPolicy): CallToolResult {
  const content: CallToolResult['content'] = [{ type: 'text', text: result.text }];
  if (result.sandbox_denied) content.push({ type: 'text', text: denialNote(result, policy) });
  if (result.warning !== undefined) content.push({ type: 'text', text: `Warning: ${result.warning}` });
  return { content, structuredContent: { ...result } };
}

/**
 * The next outcome of a tool run: its reply (a facade body: a result or `{code, message}`), or
 * an approval the model must have a person decide.
 */
export function outcomeResult(tool: string, outcome: RunOutcome, policy: ApprovalPolicy): CallToolResult {
  if (outcome.kind === 'approval') {
    const body = approvalRequiredBody(outcome.approval, undefined);
    const r = outcome.approval.request;
    const text = [
      `Approval required: the command ${JSON.stringify(r.argv.join(' '))} (in ${r.cwd}) needs the user's approval before it ${r.purpose === 'sandbox-retry' ? 'is retried without the sandbox' : 'runs'}. Reason: ${r.reason}.`,
      `Ask the user, then call decide_approval with {"approval_id": "${outcome.approval.id}", "decision": "approved"} (or "approved-for-session", "denied", "abort").`,
      `decide_approval answers with this command's result. Unanswered, the approval counts as denied at ${outcome.approval.expiresAt}.`,
    ].join('\n');
    return textResult(text, body);
  }
  const reply = outcome.reply;
  if (reply.statusCode === 200) {
    const body = reply.body;
    // A run the HTTP tool-call route started answers the model's function output instead.
    return 'chunk_id' in body ? execResult(body, policy) : textResult(body.output, body);
  }
  if (reply.statusCode === 202) return textResult(`${tool}: approval required (${reply.body.approval_id})`, reply.body);
  const { code, message } = reply.body;
  const text =
    code === 'EXEC_ERR_REJECTED' ? `${tool} rejected: ${message} (${code})` : `${tool} failed: ${message} (${code})`;
  return { content: [{ type: 'text', text }], structuredContent: { code, message }, isError: true };
}
