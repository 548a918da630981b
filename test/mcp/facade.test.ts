/**
 * MCP's command tools are the HTTP facade's, on both backends: the same command on the same
 * session answers the same text block (Codex's format, middle-truncated to max_output_tokens)
 * and the same JSON over MCP as over `POST /v1/sessions/:id/exec_command`; and a sandbox denial
 * is followed through as a model would: it asks for escalation, the result says how to get the
 * user's approval, decide_approval runs the command outside the sandbox.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { test } from 'node:test';
import type { ExecToolResult, SessionInfo } from '../../src/protocol/index.ts';
import { dockerTestOptions } from '../docker/engine.ts';
import { BACKENDS } from '../support/backends.ts';

// Loaded once the engine check above is done (see mcp.test.ts).
const { startServer } = await import('../support/harness.ts');
const { requestJson, TEXT_RE } = await import('../http/helpers.ts');
const { call, mcpClient, textOf } = await import('./helpers.ts');

const SH = { login: false, shell: '/bin/sh' } as const;

/** A result's text and JSON without what differs between two runs (chunk id, wall time). */
function comparable(text: string, body: Partial<ExecToolResult> | undefined): unknown {
  const m = TEXT_RE.exec(text);
  assert.ok(m, text);
  const { chunk_id: _c, wall_time_seconds: _w, text: _t, ...rest } = body ?? {};
  return { exit: m[3], running: m[4], tokens: m[5], output: m[6], rest };
}

for (const backend of BACKENDS) {
  const options = backend === 'docker' ? dockerTestOptions : { timeout: 60_000 };

  test(
    `mcp (${backend}): exec_command answers what the HTTP facade answers, truncation included`,
    options,
    async (t) => {
      const s = await startServer({ backend });
      t.after(() => s.close());
      const { client } = await mcpClient(t, s.httpUrl);
      const made = await call<SessionInfo>(client, 'create_session', {});
      const id = String(made.structuredContent?.sessionId);

      for (const body of [
        { cmd: 'seq 1 3000; echo tail-line; exit 4', max_output_tokens: 40, ...SH },
        { cmd: 'printf "one\\ntwo\\n"', ...SH },
      ]) {
        const http = await requestJson<ExecToolResult>(`${s.httpUrl}/v1/sessions/${id}/exec_command`, 'POST', body);
        assert.equal(http.status, 200, JSON.stringify(http.body));
        const mcp = await call<ExecToolResult>(client, 'exec_command', body);
        assert.equal(mcp.isError, undefined, textOf(mcp));
        // The model reads the facade's own text block, as its only text here.
        assert.equal(mcp.content.length, 1);
        assert.equal(textOf(mcp), mcp.structuredContent?.text);
        assert.deepEqual(comparable(textOf(mcp), mcp.structuredContent), comparable(http.body.text, http.body));
      }
      const truncated = await call<ExecToolResult>(client, 'exec_command', {
        cmd: 'seq 1 3000; echo tail-line',
        max_output_tokens: 40,
        ...SH,
      });
      const out = truncated.structuredContent?.output ?? '';
      assert.match(out, /^Warning: truncated output \(original token count: \d+\)\nTotal output lines: 3001\n\n1\n2\n/);
      assert.match(out, /\n\d+…\d+ tokens truncated…\d+\n/);
      assert.match(out, /tail-line\n$/);
      assert.ok(Number(truncated.structuredContent?.original_token_count) > 40);
    },
  );

  test(
    `mcp (${backend}): a denied command, escalated, approved by the user, runs outside the sandbox`,
    options,
    async (t) => {
      const s = await startServer({ backend });
      t.after(() => s.close());
      const { client } = await mcpClient(t, s.httpUrl);
      // Outside the writable roots on both backends (on the local one, the host's /var/tmp).
      const target = `/var/tmp/mcp-escalated-${randomUUID()}`;
      if (backend === 'local') t.after(() => rm(target, { force: true }));
      const cmd = `echo escalated > ${target} && cat ${target}`;

      const denied = await call<ExecToolResult>(client, 'exec_command', { cmd, ...SH });
      assert.equal(denied.structuredContent?.sandbox_denied, true, textOf(denied));
      assert.match(textOf(denied), /The sandbox denied this command[\s\S]*"sandbox_permissions": "require_escalated"/);

      const asked = await call(client, 'exec_command', {
        cmd,
        sandbox_permissions: 'require_escalated',
        justification: 'the test writes outside the workspace',
        ...SH,
      });
      assert.equal(asked.isError, undefined, textOf(asked));
      assert.equal(asked.structuredContent?.['status'], 'approval_required', textOf(asked));
      const approvalId = String(asked.structuredContent?.['approval_id']);
      const text = textOf(asked);
      assert.match(
        text,
        /^Approval required: the command .*echo escalated.* needs the user's approval before it runs\./,
      );
      assert.match(text, /Reason: command asks to run without the sandbox: the test writes outside the workspace\./);
      assert.ok(
        text.includes(`call decide_approval with {"approval_id": "${approvalId}", "decision": "approved"}`),
        text,
      );
      // Nothing ran while the approval waits.
      const notYet = await call(client, 'read_file', { path: target });
      assert.match(textOf(notYet), /EXEC_ERR_NOT_FOUND/);

      const ran = await call<ExecToolResult>(client, 'decide_approval', {
        approval_id: approvalId,
        decision: 'approved',
      });
      assert.equal(ran.structuredContent?.exit_code, 0, textOf(ran));
      assert.equal(ran.structuredContent?.output, 'escalated\n');
      assert.match(textOf(ran), /^Chunk ID: [0-9a-f]{6}\n[\s\S]*Process exited with code 0\n/);
      assert.equal(textOf(await call(client, 'read_file', { path: target })), 'escalated\n');
      // An approval is answered once.
      const twice = await call(client, 'decide_approval', { approval_id: approvalId, decision: 'approved' });
      assert.equal(twice.isError, true);
      assert.match(textOf(twice), /EXEC_ERR_/);
    },
  );
}

test('mcp: the command tools and create_session are listed with the schemas of the protocol module', async () => {
  const { toolList } = await import('../../src/mcp/tools.ts');
  const { jsonSchema } = await import('../../src/mcp/schemas.ts');
  const { ExecCommandBodySchema, MAX_SESSION_BATCH, PortBodySchema, SessionSpecSchema, WriteStdinBodySchema } =
    await import('../../src/protocol/index.ts');
  const listed = new Map(toolList().map((tool) => [tool.name, tool.inputSchema]));
  const propertiesOf = (name: string) => {
    const {
      session: _s,
      bind: _b,
      count: _c,
      ...rest
    } = (listed.get(name)?.['properties'] ?? {}) as Record<string, unknown>;
    return rest;
  };
  assert.deepEqual(propertiesOf('exec_command'), jsonSchema(ExecCommandBodySchema)['properties']);
  assert.deepEqual(propertiesOf('write_stdin'), jsonSchema(WriteStdinBodySchema)['properties']);
  assert.deepEqual(propertiesOf('create_session'), jsonSchema(SessionSpecSchema)['properties']);
  // A batch (best-of-N) is bounded as the HTTP route's `?count=`.
  const count = ((listed.get('create_session')?.['properties'] ?? {}) as Record<string, { maximum?: number }>)['count'];
  assert.equal(count?.maximum, MAX_SESSION_BATCH);
  assert.deepEqual(listed.get('exec_command')?.['required'], jsonSchema(ExecCommandBodySchema)['required']);
  // expose_port: the route's bounds, described for a model.
  const port = propertiesOf('expose_port')['port'] as Record<string, unknown>;
  const { description: _d, ...bounds } = jsonSchema(PortBodySchema.properties.port);
  assert.deepEqual({ ...port, description: undefined }, { ...bounds, description: undefined });
});
