import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import type { ApprovalRequired, ErrorBody, FunctionCallOutput, SessionInfo } from '../../src/protocol/index.ts';
import { newSession, serverWithApi, TEXT_RE } from './helpers.ts';

const call = (name: string, args: unknown, extra: Record<string, unknown> = {}) => ({
  type: 'function_call',
  id: 'fc_1',
  call_id: 'call_42',
  name,
  arguments: typeof args === 'string' ? args : JSON.stringify(args),
  status: 'completed',
  ...extra,
});

test('tool-call routing: every branch of the tool-call route (docs/protocol.md)', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api);
  const path = `/v1/sessions/${id}/tool-calls`;
  const workdir = (await api<SessionInfo>('GET', `/v1/sessions/${id}`)).body.workdir;

  // Not a tool item: ignored.
  for (const item of [{ type: 'message', role: 'assistant', content: [] }, { type: 'reasoning', summary: [] }, {}]) {
    const r = await api('POST', path, item);
    assert.equal(r.status, 204, JSON.stringify(item));
    assert.equal(r.body, undefined);
  }
  // Missing call_id or name: refused.
  const noCall = await api<ErrorBody>('POST', path, { type: 'function_call', name: 'exec_command', arguments: '{}' });
  assert.equal(noCall.status, 400);
  assert.equal(noCall.body.code, 'EXEC_ERR_INVALID_PARAMS');
  assert.match(noCall.body.message, /call_id/);
  const noName = await api<ErrorBody>('POST', path, { type: 'function_call', call_id: 'call_7', arguments: '{}' });
  assert.equal(noName.status, 400);
  assert.match(noName.body.message, /name/);
  assert.equal(noName.body.call_id, 'call_7');
  // Unknown tool: answered to the model.
  const unknown = await api<FunctionCallOutput>('POST', path, call('apply_patch', { input: 'x' }));
  assert.equal(unknown.status, 200);
  assert.deepEqual(
    { type: unknown.body.type, call_id: unknown.body.call_id, output: unknown.body.output },
    { type: 'function_call_output', call_id: 'call_42', output: 'unsupported call: apply_patch' },
  );
  // A payload kind the tool does not take: fatal for the harness.
  const custom = await api<ErrorBody>('POST', path, {
    type: 'custom_tool_call',
    call_id: 'call_9',
    name: 'exec_command',
    input: 'echo hi',
  });
  assert.equal(custom.status, 400);
  assert.equal(custom.body.code, 'EXEC_ERR_TOOL_PAYLOAD');
  assert.equal(custom.body.call_id, 'call_9');
  assert.match(custom.body.message, /tool "exec_command" invoked with incompatible payload/);
  // Bad arguments: the model is told.
  const badJson = await api<FunctionCallOutput>('POST', path, call('exec_command', '{"cmd": '));
  assert.equal(badJson.status, 200);
  assert.match(badJson.body.output, /^failed to parse function arguments: /);
  const missing = await api<FunctionCallOutput>('POST', path, call('exec_command', { workdir: '.' }));
  assert.equal(missing.body.output, 'failed to parse function arguments: missing field `cmd`');
  // Run: a function_call_output with the call_id and the Codex text.
  const ran = await api<FunctionCallOutput>(
    'POST',
    path,
    call('exec_command', { cmd: 'echo routed > routed.txt; cat routed.txt', login: false }),
  );
  assert.equal(ran.status, 200, JSON.stringify(ran.body));
  assert.equal(ran.body.type, 'function_call_output');
  assert.equal(ran.body.call_id, 'call_42');
  const m = TEXT_RE.exec(ran.body.output);
  assert.ok(m, ran.body.output);
  assert.equal(m[3], '0');
  assert.equal(m[6], 'routed\n');
  // write_stdin through the router, including its error text.
  const bg = await api<FunctionCallOutput>(
    'POST',
    path,
    call('exec_command', { cmd: 'sleep 0.6; echo bg-done', login: false, yield_time_ms: 250 }),
  );
  const sid = bg.body.result?.session_id ?? 0;
  assert.ok(sid >= 1000);
  const polled = await api<FunctionCallOutput>(
    'POST',
    path,
    call('write_stdin', { session_id: sid, chars: '' }, { call_id: 'call_43' }),
  );
  assert.equal(polled.body.call_id, 'call_43');
  assert.match(polled.body.output, /Process exited with code 0\n[\s\S]*bg-done\n$/);
  const unknownSession = await api<FunctionCallOutput>('POST', path, call('write_stdin', { session_id: 1 }));
  assert.equal(unknownSession.status, 200);
  assert.equal(unknownSession.body.output, 'write_stdin failed: Unknown process id 1');
  assert.ok(existsSync(join(workdir, 'routed.txt')));
});

test('tool-call routing: forbidden by policy is rejected (the model is told); nothing runs', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api, { approvalPolicy: 'on-failure' });
  const workdir = (await api<SessionInfo>('GET', `/v1/sessions/${id}`)).body.workdir;
  const r = await api<FunctionCallOutput>(
    'POST',
    `/v1/sessions/${id}/tool-calls`,
    call('exec_command', { cmd: 'touch forbidden', sandbox_permissions: 'require_escalated' }),
  );
  assert.equal(r.status, 200);
  assert.equal(r.body.status, 'rejected');
  assert.equal(r.body.code, 'EXEC_ERR_REJECTED');
  assert.equal(r.body.call_id, 'call_42');
  assert.equal(
    r.body.output,
    'approval policy is OnFailure; reject command — you cannot ask for escalated permissions if the approval policy is OnFailure',
  );
  assert.equal(existsSync(join(workdir, 'forbidden')), false);
});

test('tool-call routing: approval pending answers approval_required; the decision returns the function_call_output', async (t) => {
  const api = await serverWithApi(t);
  const id = await newSession(api, { approvalPolicy: 'on-request' });
  const r = await api<ApprovalRequired>(
    'POST',
    `/v1/sessions/${id}/tool-calls`,
    call('exec_command', {
      cmd: 'echo escalated',
      login: false,
      sandbox_permissions: 'require_escalated',
      justification: 'needs it',
    }),
  );
  assert.equal(r.status, 202, JSON.stringify(r.body));
  assert.equal(r.body.status, 'approval_required');
  assert.equal(r.body.call_id, 'call_42');
  const d = await api<FunctionCallOutput>('POST', `/v1/sessions/${id}/approvals/${r.body.approval_id}`, {
    decision: 'approved',
  });
  assert.equal(d.status, 200, JSON.stringify(d.body));
  assert.equal(d.body.type, 'function_call_output');
  assert.equal(d.body.call_id, 'call_42');
  assert.match(d.body.output, /Process exited with code 0\n[\s\S]*escalated\n$/);
  // Denied: the model is told the command was rejected.
  const again = await api<ApprovalRequired>(
    'POST',
    `/v1/sessions/${id}/tool-calls`,
    call('exec_command', { cmd: 'echo nope', sandbox_permissions: 'require_escalated' }, { call_id: 'call_44' }),
  );
  const no = await api<FunctionCallOutput>('POST', `/v1/sessions/${id}/approvals/${again.body.approval_id}`, {
    decision: 'denied',
  });
  assert.equal(no.status, 200);
  assert.deepEqual(
    { call_id: no.body.call_id, output: no.body.output, status: no.body.status },
    { call_id: 'call_44', output: 'exec command rejected by user', status: 'rejected' },
  );
});
