/**
 * Draining (src/transport/drain.ts) on a real server (local backend): before it, ready; once it
 * starts, `/readyz` fails and new requests get 503 `EXEC_ERR_SHUTTING_DOWN` while `/healthz`
 * still answers, and an open WebSocket client gets `server/draining` and then close code 1012.
 * An MCP client gets a `notifications/message` (logging) naming the drain and its session, on
 * its standalone stream and on the stream of a call still running.
 * Which stops keep the sessions (`keepsSessions`): a fleet or `--shutdown-sessions keep`, never a
 * backend whose sessions cannot outlive the process.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Backend } from '../../src/backends/types.ts';
import { DRAIN_CLOSE_CODE, keepsSessions } from '../../src/transport/drain.ts';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { asTenantId } from '../../src/ids.ts';
import type { McpDrainingData } from '../../src/mcp/drain-notice.ts';
import { startServer, TestSession } from '../support/harness.ts';
import { call, mcpClient } from '../mcp/helpers.ts';

test('a draining server fails readiness, refuses new requests and sends its clients away with 1012', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const s = await TestSession.open(server.url);
  const closed = new Promise<number>((r) => s.conn.onClose((code) => r(code)));
  assert.equal((await fetch(`${server.httpUrl}/readyz`)).status, 200);

  const told = await server.app.drain.start();
  assert.equal(told, 1, 'one connection told');
  assert.equal(await server.app.drain.start(), 0, 'a second start does nothing');
  const ready = await fetch(`${server.httpUrl}/readyz`);
  assert.equal(ready.status, 503);
  assert.equal(((await ready.json()) as { code: string }).code, 'EXEC_ERR_SHUTTING_DOWN');
  assert.equal((await fetch(`${server.httpUrl}/healthz`)).status, 200, 'alive while draining');
  assert.equal((await fetch(`${server.httpUrl}/v1/sessions`)).status, 503, 'no new work');

  assert.equal(await closed, DRAIN_CLOSE_CODE);
  const note = s.notifications.find((n) => n.method === 'server/draining');
  assert.ok(note, 'server/draining before the close');
  assert.equal(note.params['reconnect'], true);
  assert.equal(typeof note.params['retryAfterMs'], 'number');
});

test('an MCP client is told of the drain on its streams, with the session to continue on', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const { client } = await mcpClient(t, server.httpUrl);
  const notices: McpDrainingData[] = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    if (n.params.logger === 'exec-server') notices.push(n.params.data as McpDrainingData);
  });
  await call(client, 'exec_command', { cmd: 'echo ready' });
  // A call still running when the drain starts: its response stream gets the notice too.
  const running = call(client, 'exec_command', { cmd: 'sleep 1; echo slept', yield_time_ms: 5000 });
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(await server.app.drain.start(), 1, 'the MCP connection is told');
  await running;
  for (let i = 0; i < 50 && notices.length < 2; i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(notices.length, 2, "on the client's standalone stream and on the running call's");
  const sessions = server.app.sessions.list(asTenantId('default')).map((s) => s.id as string);
  for (const n of notices) {
    assert.equal(n.event, 'server/draining');
    assert.equal(n.reconnect, true);
    assert.equal(typeof n.retryAfterMs, 'number');
    assert.equal(n.sessionHeader, 'x-exec-session');
    assert.ok(sessions.includes(n.sessionId ?? ''), 'it names the session the connection works on');
  }
});

test('keepsSessions: a fleet or --shutdown-sessions keep, on a backend that can hand over', () => {
  const docker = { handOver: async () => undefined } as unknown as Backend;
  const local = {} as Backend;
  assert.equal(keepsSessions({ fleet: true, shutdownSessions: 'end' }, docker), true);
  assert.equal(keepsSessions({ fleet: false, shutdownSessions: 'keep' }, docker), true);
  assert.equal(keepsSessions({ fleet: false, shutdownSessions: 'end' }, docker), false, 'a single server ends them');
  assert.equal(
    keepsSessions({ fleet: false, shutdownSessions: 'keep' }, local),
    false,
    'local sessions cannot outlive it',
  );
});
