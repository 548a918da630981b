/**
 * Draining (src/transport/drain.ts) on a real server (local backend): before it, ready; once it
 * starts, `/readyz` fails and new requests get 503 `EXEC_ERR_SHUTTING_DOWN` while `/healthz`
 * still answers, and an open WebSocket client gets `server/draining` and then close code 1012.
 * Which stops keep the sessions (`keepsSessions`): a fleet or `--shutdown-sessions keep`, never a
 * backend whose sessions cannot outlive the process.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Backend } from '../../src/backends/types.ts';
import { DRAIN_CLOSE_CODE, keepsSessions } from '../../src/transport/drain.ts';
import { startServer, TestSession } from '../support/harness.ts';

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
