/**
 * The snapshots of one session under its own path (`GET /v1/sessions/:id/snapshots`,
 * `DELETE /v1/sessions/:id/snapshots/:snapshotId`; docs/protocol.md, "Session tokens"): a
 * session token sees and deletes the snapshots of its session, never another session's, and a
 * `read` token only lists them. Real engine, a server process of the test's own.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ExecServerClient } from '../../src/client/index.ts';
import type { SessionToken, SnapshotInfo } from '../../src/protocol/index.ts';
import { requestJson } from '../http/helpers.ts';
import { startDevServer } from '../support/dev-server.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';

const TENANT = 'session-snapshots-secret';

interface AuditLine {
  action: string;
  principal: string;
  session: string | null;
  detail: Record<string, unknown>;
}

/** The lines of `action` once there are `count` of them (10 s at most). */
async function auditLines(path: string, action: string, count: number): Promise<AuditLine[]> {
  const until = Date.now() + 10_000;
  for (;;) {
    const text = await readFile(path, 'utf8');
    const lines = text
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as AuditLine)
      .filter((l) => l.action === action);
    if (lines.length >= count || Date.now() > until) return lines;
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('a session token lists and deletes its session snapshots only', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 240_000,
}, async (t) => {
  const env = { ...process.env, EXEC_SERVER_TOKENS: `acme:${TENANT}` };
  const auditLog = join(await mkdtemp(join(tmpdir(), 'session-snapshots-')), 'audit.jsonl');
  const server = await startDevServer({
    image: TEST_IMAGE,
    instanceId: `snaps-${process.pid}-${Date.now()}`,
    env,
    flags: ['--audit-log', auditLog],
  });
  const call = <T>(path: string, method: string, token: string, body?: unknown) =>
    requestJson<T>(`${server.http}${path}`, method, body, token);
  const sessions: string[] = [];
  const snapshots: string[] = [];
  t.after(async () => {
    for (const id of sessions) await call(`/v1/sessions/${id}`, 'DELETE', TENANT);
    for (const id of snapshots) await call(`/v1/snapshots/${encodeURIComponent(id)}`, 'DELETE', TENANT);
    await server.stop();
  });
  const session = async (): Promise<string> => {
    const made = await call<{ sessionId: string }>('/v1/sessions', 'POST', TENANT, {});
    assert.equal(made.status, 201, JSON.stringify(made.body));
    sessions.push(made.body.sessionId);
    return made.body.sessionId;
  };
  const snapshot = async (id: string, name: string): Promise<string> => {
    const snap = await call<SnapshotInfo>(`/v1/sessions/${id}/snapshots`, 'POST', TENANT, { name });
    assert.equal(snap.status, 201, JSON.stringify(snap.body));
    snapshots.push(snap.body.snapshotId);
    return snap.body.snapshotId;
  };
  const a = await session();
  const b = await session();
  const ofA = await snapshot(a, 'of-a');
  const ofB = await snapshot(b, 'of-b');
  const mint = async (access: string): Promise<SessionToken> =>
    (await call<SessionToken>(`/v1/sessions/${a}/tokens`, 'POST', TENANT, { access })).body;
  const full = await mint('full');
  const read = await mint('read');
  const listed = async (token: string, id = a) =>
    call<{ snapshots: SnapshotInfo[] }>(`/v1/sessions/${id}/snapshots`, 'GET', token);
  const codeOf = (body: unknown) => (body as { code?: string }).code;

  for (const token of [full.token, read.token, TENANT]) {
    const own = await listed(token);
    assert.equal(own.status, 200, JSON.stringify(own.body));
    assert.deepEqual(
      own.body.snapshots.map((s) => s.snapshotId),
      [ofA],
    );
  }
  // The tenant-wide list and another session's stay closed to a session token.
  const wide = await call('/v1/snapshots', 'GET', full.token);
  assert.deepEqual([wide.status, codeOf(wide.body)], [403, 'EXEC_ERR_TOKEN_SCOPE']);
  const other = await listed(full.token, b);
  assert.deepEqual([other.status, codeOf(other.body)], [403, 'EXEC_ERR_TOKEN_SCOPE']);

  // Another session's snapshot is not this session's, by any id: nothing is deleted.
  for (const id of [ofB, ofB.replace(/^sha256:/, ''), ofB.slice(0, 19), 'of-b']) {
    const refused = await call(`/v1/sessions/${a}/snapshots/${encodeURIComponent(id)}`, 'DELETE', full.token);
    assert.deepEqual([refused.status, codeOf(refused.body)], [404, 'EXEC_ERR_NOT_FOUND'], id);
  }
  const readOnly = await call(`/v1/sessions/${a}/snapshots/${encodeURIComponent(ofA)}`, 'DELETE', read.token);
  assert.deepEqual([readOnly.status, codeOf(readOnly.body)], [403, 'EXEC_ERR_TOKEN_READ_ONLY']);
  const all = await call<{ snapshots: SnapshotInfo[] }>('/v1/snapshots', 'GET', TENANT);
  assert.deepEqual(all.body.snapshots.map((s) => s.snapshotId).sort(), [ofA, ofB].sort());

  // The SDK's session handle, on the full token: lists, then deletes by the listed id.
  const client = await ExecServerClient.connect(server.url, { token: full.token, resumeSessionId: a });
  try {
    assert.deepEqual(
      (await client.listSnapshots()).map((s) => s.snapshotId),
      [ofA],
    );
    await client.deleteSnapshot(ofA);
    assert.deepEqual(await client.listSnapshots(), []);
  } finally {
    await client.disconnect();
  }
  const left = await call<{ snapshots: SnapshotInfo[] }>('/v1/snapshots', 'GET', TENANT);
  assert.deepEqual(
    left.body.snapshots.map((s) => s.snapshotId),
    [ofB],
  );

  // The tenant may name the snapshot by its hex alone; a session that is gone answers 404.
  const again = await snapshot(a, 'again');
  const byHex = await call(`/v1/sessions/${a}/snapshots/${again.replace(/^sha256:/, '')}`, 'DELETE', TENANT);
  assert.equal(byHex.status, 204, JSON.stringify(byHex.body));
  // Each delete is in the audit log, under its caller (lines are written just after the answer).
  const deletes = await auditLines(auditLog, 'snapshot.delete', 2);
  assert.deepEqual(
    deletes.map((l) => [l.principal, l.session, l.detail['snapshot']]),
    [
      [`session-token:${full.tokenId}`, a, ofA],
      ['tenant:acme', a, again],
    ],
  );
  const gone = await call('/v1/sessions/no-such-session/snapshots', 'GET', TENANT);
  assert.deepEqual([gone.status, codeOf(gone.body)], [404, 'EXEC_ERR_SESSION_NOT_FOUND']);
});
