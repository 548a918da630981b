/** What a model reads back from an MCP tool (src/mcp/results.ts): results, denials, approvals, errors with their code. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { errorResult, execResult, outcomeResult, textResult } from '../../src/mcp/results.ts';
import { execError } from '../../src/errors.ts';
import type { ExecToolResult } from '../../src/protocol/index.ts';
import type { PendingApproval } from '../../src/tools/approval-queue.ts';

const result = (over: Partial<ExecToolResult> = {}): ExecToolResult => ({
  chunk_id: 'c1',
  wall_time_seconds: 0.1,
  exit_code: 1,
  original_token_count: 3,
  output: 'out',
  text: 'Process exited with code 1\nOutput:\nout',
  ...over,
});
const texts = (r: { content: Array<{ type: string; text?: string }> }) => r.content.map((c) => c.text ?? '');

test('textResult: one text block, structured content only when given', () => {
  assert.deepEqual(textResult('hi'), { content: [{ type: 'text', text: 'hi' }] });
  assert.deepEqual(textResult('hi', { a: 1 }).structuredContent, { a: 1 });
});

test('errorResult: a tool error naming the stable code; anything thrown becomes internal', () => {
  const r = errorResult('exec_command', execError('EXEC_ERR_SESSION_DEAD', 'session ended'));
  assert.equal(r.isError, true);
  assert.deepEqual(texts(r), ['exec_command failed: session ended (EXEC_ERR_SESSION_DEAD)']);
  assert.deepEqual(r.structuredContent, { code: 'EXEC_ERR_SESSION_DEAD', message: 'session ended' });
  assert.match(texts(errorResult('x', new Error('boom')))[0] ?? '', /boom \(EXEC_ERR_INTERNAL\)$/);
});

test('execResult: the text block, then a denial note that matches what the policy allows, then a warning', () => {
  assert.deepEqual(texts(execResult(result(), 'on-request')), [result().text]);
  const denied = result({ sandbox_denied: true, warning: 'output truncated' });
  const [text, note, warning] = texts(execResult(denied, 'on-request'));
  assert.equal(text, denied.text);
  assert.match(note ?? '', /exit code 1.*"sandbox_permissions": "require_escalated"/);
  assert.equal(warning, 'Warning: output truncated');
  assert.match(texts(execResult(denied, 'never'))[1] ?? '', /approval policy \(never\) does not allow/);
  assert.match(texts(execResult(result({ sandbox_denied: true, exit_code: undefined }), 'never'))[1] ?? '', /unknown/);
  assert.deepEqual(execResult(denied, 'never').structuredContent, { ...denied });
});

test('an approval says what to run, where, why, and how to answer it', () => {
  const approval = {
    id: 'ap-1',
    request: { processId: 'p', argv: ['rm', '-rf', 'build'], cwd: '/w', purpose: 'sandbox-retry', reason: 'denied' },
    createdAt: '2026-01-01T00:00:00Z',
    expiresAt: '2026-01-01T00:05:00Z',
    run: {} as PendingApproval['run'],
  } satisfies PendingApproval;
  const r = outcomeResult('exec_command', { kind: 'approval', approval }, 'on-request');
  const [text] = texts(r);
  assert.match(text ?? '', /"rm -rf build" \(in \/w\) .* before it is retried without the sandbox\. Reason: denied\./);
  assert.match(text ?? '', /\{"approval_id": "ap-1", "decision": "approved"\}/);
  assert.match(text ?? '', /counts as denied at 2026-01-01T00:05:00Z/);
  assert.deepEqual((r.structuredContent as { approval_id: string }).approval_id, 'ap-1');
});

test('replies: 200 results, function outputs, 202 approvals, and errors (rejections said as such)', () => {
  const ok = outcomeResult('exec_command', { kind: 'reply', reply: { statusCode: 200, body: result() } }, 'never');
  assert.deepEqual(texts(ok), [result().text]);
  const fn = { type: 'function_call_output' as const, call_id: 'c', output: 'model text' };
  assert.deepEqual(texts(outcomeResult('tool', { kind: 'reply', reply: { statusCode: 200, body: fn } }, 'never')), [
    'model text',
  ]);
  const pending = { status: 'approval_required' as const, approval_id: 'ap-2', approval: {} as never };
  assert.deepEqual(texts(outcomeResult('t', { kind: 'reply', reply: { statusCode: 202, body: pending } }, 'never')), [
    't: approval required (ap-2)',
  ]);
  const rejected = outcomeResult(
    't',
    { kind: 'reply', reply: { statusCode: 403, body: { code: 'EXEC_ERR_REJECTED', message: 'the user said no' } } },
    'never',
  );
  assert.deepEqual([texts(rejected), rejected.isError], [['t rejected: the user said no (EXEC_ERR_REJECTED)'], true]);
  const failed = outcomeResult(
    't',
    { kind: 'reply', reply: { statusCode: 410, body: { code: 'EXEC_ERR_SESSION_DEAD', message: 'gone' } } },
    'never',
  );
  assert.deepEqual(texts(failed), ['t failed: gone (EXEC_ERR_SESSION_DEAD)']);
});
