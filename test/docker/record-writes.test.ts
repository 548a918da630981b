/**
 * The session record is written one write at a time (Session.persistRecord): ports exposed at
 * once, right after the create whose own record write is still under way, all succeed, and the
 * record a restarted server reads back holds every one of them.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { requestJson } from '../http/helpers.ts';
import { abandon, startServer } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';

test('ports exposed at once right after the create are all stored', dockerTestOptions, async (t) => {
  const instanceId = `records-${process.pid}-${Date.now()}`;
  const flags = ['--token', 'tok', '--warm-pool', '0'];
  const first = await startServer({ backend: 'docker', instanceId, flags });
  for (let round = 0; round < 3; round++) {
    const made = await requestJson<{ sessionId: string }>(
      `${first.httpUrl}/v1/sessions`,
      'POST',
      { previewPorts: true },
      'tok',
    );
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const id = made.body.sessionId;
    const ports = [8001, 8002, 8003];
    const exposed = await Promise.all(
      ports.map((port) => requestJson(`${first.httpUrl}/v1/sessions/${id}/ports`, 'POST', { port }, 'tok')),
    );
    assert.deepEqual(
      exposed.map((e) => e.status),
      [201, 201, 201],
      JSON.stringify(exposed.map((e) => e.body)),
    );
    if (round < 2) continue;
    // The server "crashes"; the next one reads the record back.
    await abandon(first);
    const second = await startServer({ backend: 'docker', instanceId, flags });
    t.after(() => second.close());
    const listed = await requestJson<{ ports: Array<{ port: number }> }>(
      `${second.httpUrl}/v1/sessions/${id}/ports`,
      'GET',
      undefined,
      'tok',
    );
    assert.equal(listed.status, 200, JSON.stringify(listed.body));
    assert.deepEqual(listed.body.ports.map((p) => p.port).sort(), ports);
  }
});
