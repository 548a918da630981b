/**
 * MCP in a fleet (src/mcp/forwarded-calls.ts): an MCP connection held by replica B works on a
 * session replica A owns. Two server processes with one --instance-id, --fleet and two tenants'
 * tokens, on one engine: B's `list_sessions` lists A's session; `exec_command`, `write_stdin`,
 * `write_file` and `read_file` naming it run on A (A keeps it, nothing is taken over), and bind
 * it; another tenant's call is told the session does not exist; a session token cannot use the
 * replicas' route; A SIGKILLed, B's next call takes the session over and runs it here.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { requestJson } from '../http/helpers.ts';
import { call, mcpClient, textOf } from '../mcp/helpers.ts';
import { type DevServer, spawnDevServer } from '../support/dev-server.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';
import { removeInstanceContainers } from './helpers.ts';

const instanceId = `fleet-mcp-${randomUUID().slice(0, 8)}`;
const ALICE = `alice-${randomUUID()}`;
const BOB = `bob-${randomUUID()}`;

async function replica(name: string): Promise<DevServer> {
  const server = await spawnDevServer({
    image: TEST_IMAGE,
    instanceId,
    flags: ['--fleet', '--session-token-secret', instanceId, '--replica-id', name, '--warm-pool', '0'],
    env: { ...process.env, EXEC_SERVER_TOKENS: `alice:${ALICE},bob:${BOB}` },
    logLevel: 'info',
    stderr: 'capture',
  });
  await server.ready();
  return server;
}

test('an MCP connection on one replica works on a session another replica owns', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  const [a, b] = await Promise.all([replica('a'), replica('b')]);
  t.after(async () => {
    if (process.env.FLEET_TEST_LOGS) for (const r of [a, b]) console.error(r.stderr());
    await Promise.all([a.kill(), b.kill()]);
    await removeInstanceContainers(instanceId);
  });
  const made = await requestJson<{ sessionId: string }>(
    `${a.http}/v1/sessions`,
    'POST',
    { sandbox: { type: 'danger-full-access' } },
    ALICE,
  );
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const id = made.body.sessionId;

  const { client, transport } = await mcpClient(t, b.http, { token: ALICE });
  assert.match(transport.sessionId ?? '', /^b~/, 'B holds this MCP connection');
  const listed = await call<{ sessions: { sessionId: string }[] }>(client, 'list_sessions');
  assert.ok(
    listed.structuredContent?.sessions?.some((s) => s.sessionId === id),
    `B's list_sessions lists A's session: ${textOf(listed)}`,
  );

  const ran = await call<{ exit_code: number }>(client, 'exec_command', {
    session: id,
    cmd: 'echo from-a > /tmp/marker; cat /tmp/marker; exit 4',
  });
  assert.equal(ran.isError, undefined, textOf(ran));
  assert.match(textOf(ran), /from-a/);
  assert.equal(ran.structuredContent?.exit_code, 4);
  // The call bound the session: one without `session` works on it too, on A.
  const bound = await call(client, 'exec_command', { cmd: 'cat /tmp/marker' });
  assert.match(textOf(bound), /from-a/, textOf(bound));
  const shell = await call<{ session_id: number }>(client, 'exec_command', {
    cmd: 'read -r line; echo "got:$line"',
    tty: true,
    yield_time_ms: 300,
  });
  const sid = shell.structuredContent?.session_id;
  assert.equal(typeof sid, 'number', `a command still running answers its session_id: ${textOf(shell)}`);
  const answered = await call(client, 'write_stdin', { session: id, session_id: sid, chars: 'hello\n' });
  assert.match(textOf(answered), /got:hello/, textOf(answered));
  const wrote = await call(client, 'write_file', { session: id, path: '/tmp/note.txt', content: 'via b' });
  assert.equal(wrote.isError, undefined, textOf(wrote));
  assert.match(textOf(await call(client, 'read_file', { path: '/tmp/note.txt' })), /via b/);
  assert.doesNotMatch(b.stderr(), /took over/, 'B ran every call on the live owner');
  const info = await requestJson<{ attached: boolean }>(`${a.http}/v1/sessions/${id}`, 'GET', undefined, ALICE);
  assert.equal(info.status, 200, 'A still serves the session itself');

  // Another tenant: the owner checks the caller's own token.
  const { client: bobs } = await mcpClient(t, b.http, { token: BOB });
  const foreign = await call<{ code: string }>(bobs, 'exec_command', { session: id, cmd: 'true' });
  assert.equal(foreign.isError, true);
  assert.equal(foreign.structuredContent?.code, 'EXEC_ERR_SESSION_NOT_FOUND', textOf(foreign));
  assert.ok(
    !(await call<{ sessions: { sessionId: string }[] }>(bobs, 'list_sessions')).structuredContent?.sessions?.length,
  );

  // The replicas' route takes tenant tokens only: a session token (even full) cannot fork through it.
  const minted = await requestJson<{ token: string }>(`${b.http}/v1/sessions/${id}/tokens`, 'POST', {}, ALICE);
  assert.equal(minted.status, 201, JSON.stringify(minted.body));
  const scoped = await requestJson<{ code: string }>(
    `${b.http}/v1/sessions/${id}/mcp-call`,
    'POST',
    { name: 'fork_session', arguments: {} },
    minted.body.token,
  );
  assert.equal(scoped.status, 403);
  assert.equal(scoped.body.code, 'EXEC_ERR_TOKEN_SCOPE');

  // The owner gone: B's next call takes the session over (its lease ends with A) and runs it here.
  await a.kill();
  const after = await call(client, 'exec_command', { cmd: 'cat /tmp/marker /tmp/note.txt' });
  assert.match(textOf(after), /from-a[\s\S]*via b/, textOf(after));
  assert.match(b.stderr(), new RegExp(`"sessionId":"${id}"[^\n]*took over a session whose owner is gone`));
});
