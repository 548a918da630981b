/**
 * A session serves a bounded number of observers (`initialize observe`, read session tokens):
 * each follows every output chunk with a buffer of its own, so their number bounds the memory
 * and the fan-out one session costs. The client itself is never refused for it, and a closed
 * observer makes room again.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RpcConnection, RpcError } from '../../src/client/rpc-connection.ts';
import { MAX_OBSERVERS_PER_SESSION } from '../../src/sessions/session.ts';
import { serverFor, sessionFor } from '../support/harness.ts';

async function observe(url: string, sessionId: string): Promise<RpcConnection> {
  const conn = await RpcConnection.open(url);
  try {
    await conn.request('initialize', { clientName: 'observer', resumeSessionId: sessionId, observe: true });
  } catch (err) {
    await conn.close();
    throw err;
  }
  return conn;
}

test('observers of one session are bounded, with a clear error', { timeout: 60_000 }, async (t) => {
  const server = await serverFor(t);
  const owner = await sessionFor(t, server.url);
  const observers: RpcConnection[] = [];
  t.after(() => Promise.all(observers.map((c) => c.close())));
  for (let i = 0; i < MAX_OBSERVERS_PER_SESSION; i++) observers.push(await observe(server.url, owner.sessionId));

  await assert.rejects(observe(server.url, owner.sessionId), (err: unknown) => {
    assert.ok(err instanceof RpcError, String(err));
    assert.equal(err.data?.['code'], 'EXEC_ERR_BUSY');
    assert.match(
      err.message,
      new RegExp(`too many observers of this session \\(limit ${MAX_OBSERVERS_PER_SESSION}\\)`),
    );
    return true;
  });
  // The observers still follow the session, and its client still works.
  const seen = new Promise<void>((resolve) => {
    const off = observers[0]?.onNotification((n) => {
      if (n.method === 'process/exited') {
        off?.();
        resolve();
      }
    });
  });
  await owner.run('p1', ['sh', '-c', 'echo hi']);
  await seen;

  // A closed observer makes room (once the server saw the close).
  await observers.pop()?.close();
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      observers.push(await observe(server.url, owner.sessionId));
      break;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  assert.equal(observers.length, MAX_OBSERVERS_PER_SESSION);
});
