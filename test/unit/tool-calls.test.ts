/** Routing of a model's tool call item (src/tools/tool-calls.ts) as Codex's router does it, over a fake unified exec. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { execError } from '../../src/errors.ts';
import type { ExecToolResult } from '../../src/protocol/index.ts';
import { type RouteDecision, routeToolCall } from '../../src/tools/tool-calls.ts';
import type { UnifiedExec } from '../../src/tools/unified-exec.ts';

const result: ExecToolResult = {
  chunk_id: 'c',
  wall_time_seconds: 0.1,
  exit_code: 0,
  original_token_count: 1,
  output: 'hi',
  text: 'Process exited with code 0\nOutput:\nhi',
};

/** A unified exec that records its calls and answers, or throws, what it was given. */
function fake(answer: ExecToolResult | Error = result) {
  const calls: Array<[string, unknown]> = [];
  const ue = {
    execCommand: async (args: unknown) => {
      calls.push(['exec_command', args]);
      if (answer instanceof Error) throw answer;
      return answer;
    },
    writeStdin: async (args: unknown) => {
      calls.push(['write_stdin', args]);
      if (answer instanceof Error) throw answer;
      return answer;
    },
  } as unknown as UnifiedExec;
  return { calls, ue: () => ue };
}
const call = (over: Record<string, unknown>) => ({
  type: 'function_call',
  call_id: 'c1',
  name: 'exec_command',
  ...over,
});
async function settle(d: RouteDecision) {
  assert.equal(d.kind, 'run');
  return d.kind === 'run' ? d.run.nextOutcome() : undefined;
}
const reply = (d: RouteDecision) => (d.kind === 'reply' ? d.reply : undefined);

test('items that are not tool calls are ignored', () => {
  for (const item of [{ type: 'message' }, {}, { type: 5 }])
    assert.deepEqual(routeToolCall(item, fake().ue), { kind: 'ignore' });
});

test('an item without call_id or name is refused to the harness, with the call id when it had one', () => {
  assert.deepEqual(reply(routeToolCall(call({ call_id: '' }), fake().ue)), {
    statusCode: 400,
    body: { code: 'EXEC_ERR_INVALID_PARAMS', message: 'tool call item has no call_id' },
  });
  assert.deepEqual(reply(routeToolCall(call({ name: undefined }), fake().ue))?.body, {
    code: 'EXEC_ERR_INVALID_PARAMS',
    message: 'tool call item has no name',
    call_id: 'c1',
  });
});

test('an unknown tool and bad arguments are answered to the model; a wrong payload kind is fatal', () => {
  assert.deepEqual(reply(routeToolCall(call({ name: 'apply_patch' }), fake().ue)), {
    statusCode: 200,
    body: { type: 'function_call_output', call_id: 'c1', output: 'unsupported call: apply_patch', status: 'failed' },
  });
  const out = (item: Record<string, unknown>) =>
    (reply(routeToolCall(item, fake().ue))?.body as { output?: string } | undefined)?.output ?? '';
  assert.match(out(call({ arguments: '{nope' })), /^failed to parse function arguments: /);
  assert.equal(out(call({ arguments: '[]' })), 'failed to parse function arguments: expected a JSON object');
  assert.equal(out(call({ arguments: '{}' })), 'failed to parse function arguments: missing field `cmd`');
  assert.match(out(call({ arguments: '{"cmd": 5}' })), /^failed to parse function arguments: \/cmd /);
  assert.deepEqual(reply(routeToolCall(call({ type: 'custom_tool_call' }), fake().ue)), {
    statusCode: 400,
    body: {
      code: 'EXEC_ERR_TOOL_PAYLOAD',
      message: 'tool "exec_command" invoked with incompatible payload (custom_tool_call)',
      call_id: 'c1',
    },
  });
});

test('a valid call runs: arguments as a JSON string or an object; the output carries the result', async () => {
  const f = fake();
  const outcome = await settle(routeToolCall(call({ arguments: '{"cmd": "echo hi"}' }), f.ue));
  assert.deepEqual(outcome, {
    kind: 'reply',
    reply: {
      statusCode: 200,
      body: { type: 'function_call_output', call_id: 'c1', output: result.text, status: 'completed', result },
    },
  });
  await settle(routeToolCall(call({ name: 'write_stdin', arguments: { session_id: 3, chars: 'x' } }), f.ue));
  assert.deepEqual(f.calls, [
    ['exec_command', { cmd: 'echo hi' }],
    ['write_stdin', { session_id: 3, chars: 'x' }],
  ]);
});

test('a rejected command tells the model why; other failures name the command and the code', async () => {
  const rejected = await settle(
    routeToolCall(
      call({ arguments: '{"cmd": "rm -rf /"}' }),
      fake(execError('EXEC_ERR_REJECTED', 'forbidden by policy')).ue,
    ),
  );
  assert.deepEqual(rejected?.kind === 'reply' && rejected.reply.body, {
    type: 'function_call_output',
    call_id: 'c1',
    output: 'forbidden by policy',
    status: 'rejected',
    code: 'EXEC_ERR_REJECTED',
  });
  const failed = await settle(routeToolCall(call({ arguments: '{"cmd": "ls"}' }), fake(new Error('boom')).ue));
  assert.match(JSON.stringify(failed), /exec_command failed for `ls`: boom.*"code":"EXEC_ERR_INTERNAL"/);
  const stdin = await settle(
    routeToolCall(
      call({ name: 'write_stdin', arguments: '{"session_id": 1}' }),
      fake(execError('EXEC_ERR_PROCESS_NOT_FOUND', 'gone')).ue,
    ),
  );
  assert.match(JSON.stringify(stdin), /write_stdin failed: gone/);
});
