/**
 * Which exec-server session an MCP tool call works on, on both backends: a `create_session`
 * with `"bind": false` binds nothing, the first call naming a session binds it, later calls
 * without `session` work on it and make no session of their own, and the end of a connection
 * ends only the session it made implicitly; `snapshot_session` commits
 * the bound session on docker (a session made from the snapshot sees its files) and is a
 * readable tool error on the local backend.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { SessionInfo, SnapshotInfo } from '../../src/protocol/index.ts';
import { dockerTestOptions } from '../docker/engine.ts';
import { BACKENDS } from '../support/backends.ts';

// Loaded once the engine check above is done (see mcp.test.ts).
const { startServer } = await import('../support/harness.ts');
const { requestJson } = await import('../http/helpers.ts');
const { call, mcpClient, textOf } = await import('./helpers.ts');

const SH = { login: false, shell: '/bin/sh' } as const;

for (const backend of BACKENDS) {
  const options = backend === 'docker' ? dockerTestOptions : { timeout: 60_000 };

  test(`mcp (${backend}): the first call naming a session binds it; bind: false binds nothing`, options, async (t) => {
    const s = await startServer({ backend });
    t.after(() => s.close());
    const { client } = await mcpClient(t, s.httpUrl);

    const made = await call<SessionInfo>(client, 'create_session', { bind: false });
    assert.equal(made.isError, undefined, textOf(made));
    const id = made.structuredContent?.sessionId;
    assert.ok(typeof id === 'string', textOf(made));
    assert.doesNotMatch(textOf(made), /bound to this connection/);
    const before = await call(client, 'list_sessions');
    assert.equal(before.structuredContent?.['boundSession'], null);

    // Named once, it becomes the connection's session: later calls without `session` land there.
    const named = await call(client, 'write_file', { path: 'marker.txt', content: 'bound\n', session: id });
    assert.equal(named.isError, undefined, textOf(named));
    const after = await call<{ boundSession: string; sessions: SessionInfo[] }>(client, 'list_sessions');
    assert.equal(after.structuredContent?.boundSession, id);
    const r = await call(client, 'exec_command', { cmd: 'cat marker.txt', ...SH });
    assert.equal(r.structuredContent?.['output'], 'bound\n', textOf(r));
    // No implicit session was made along the way.
    assert.deepEqual(
      (await call<{ sessions: SessionInfo[] }>(client, 'list_sessions')).structuredContent?.sessions?.map(
        (x) => x.sessionId,
      ),
      [id],
    );

    // A call naming another session works there and leaves the binding as it was.
    const other = await call<SessionInfo>(client, 'create_session', { bind: false });
    const otherId = other.structuredContent?.sessionId;
    const there = await call(client, 'exec_command', { cmd: 'test -e marker.txt; echo $?', session: otherId, ...SH });
    assert.equal(there.structuredContent?.['output'], '1\n', textOf(there));
    assert.equal((await call(client, 'list_sessions')).structuredContent?.['boundSession'], id);
    // A session id that is none of this tenant's: a tool error naming the code.
    const missing = await call(client, 'list_dir', { session: 'no-such-session' });
    assert.equal(missing.isError, true);
    assert.match(textOf(missing), /EXEC_ERR_SESSION_NOT_FOUND/);

    // The end of an MCP connection (DELETE /mcp) ends the session it made on its own, and only
    // that one: the answer comes once it is gone.
    const second = await mcpClient(t, s.httpUrl);
    await call(second.client, 'exec_command', { cmd: 'true', ...SH });
    const implicit = (await call(second.client, 'list_sessions')).structuredContent?.['boundSession'];
    assert.ok(typeof implicit === 'string' && implicit !== id && implicit !== otherId, String(implicit));
    await second.transport.terminateSession();
    const status = async (sid: unknown) => (await requestJson(`${s.httpUrl}/v1/sessions/${sid}`, 'GET')).status;
    assert.equal(await status(implicit), 404);
    assert.equal(await status(id), 200);
    assert.equal(await status(otherId), 200);
  });

  test(`mcp (${backend}): snapshot_session`, options, async (t) => {
    const s = await startServer({ backend });
    t.after(() => s.close());
    const { client } = await mcpClient(t, s.httpUrl);
    await call(client, 'write_file', { path: 'state.txt', content: 'kept in the snapshot\n' });

    const badName = await call(client, 'snapshot_session', { name: 'no spaces allowed' });
    assert.equal(badName.isError, true);
    assert.match(textOf(badName), /invalid arguments: \/name must match pattern.*EXEC_ERR_INVALID_PARAMS/);

    const badCount = await call(client, 'fork_session', { count: 17 });
    assert.equal(badCount.isError, true);
    assert.match(textOf(badCount), /count must be <= 16.*EXEC_ERR_INVALID_PARAMS/);

    const snap = await call<SnapshotInfo>(client, 'snapshot_session', { name: 'mcp-snap' });
    if (backend === 'local') {
      const forked = await call(client, 'fork_session', { count: 2 });
      assert.match(textOf(forked), /^fork_session failed: snapshots need the docker backend \(EXEC_ERR_UNSUPPORTED\)$/);
      assert.equal(snap.isError, true);
      assert.match(
        textOf(snap),
        /^snapshot_session failed: snapshots need the docker backend \(EXEC_ERR_UNSUPPORTED\)$/,
      );
      return;
    }
    assert.equal(snap.isError, undefined, textOf(snap));
    const snapshotId = snap.structuredContent?.snapshotId;
    assert.match(String(snapshotId), /^sha256:/);
    // On a failure before the end (the server is closed by then: through the backend).
    t.after(() => s.backend.deleteSnapshot(String(snapshotId), undefined).catch(() => {}));
    assert.equal(snap.structuredContent?.name, 'mcp-snap');
    assert.match(textOf(snap), new RegExp(`^snapshot ${snapshotId} of session `));

    // A session made from it (and bound) sees the file.
    const fork = await call<SessionInfo>(client, 'create_session', { snapshot: snapshotId });
    assert.equal(fork.isError, undefined, textOf(fork));
    const r = await call(client, 'read_file', { path: 'state.txt' });
    assert.equal(textOf(r), 'kept in the snapshot\n');
    // The snapshot goes once no session runs from it.
    assert.equal(
      (await requestJson(`${s.httpUrl}/v1/sessions/${fork.structuredContent?.sessionId}`, 'DELETE')).status,
      204,
    );
    const del = await requestJson(`${s.httpUrl}/v1/snapshots/${encodeURIComponent(String(snapshotId))}`, 'DELETE');
    assert.equal(del.status, 204, JSON.stringify(del.body));
  });
}
