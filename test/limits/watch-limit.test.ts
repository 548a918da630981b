/**
 * `fs/watchMissing` keeps at most `maxWatches` watches per session however the requests
 * arrive: a batch (or frames read in one go) runs every handler up to its first await before
 * any finishes, so a count checked only before the sandbox lookup let a burst past the limit.
 */
import assert from 'node:assert/strict';
import { mkdtemp, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { sessionFor, serverFor } from '../support/harness.ts';

type Reply = { id: number; result?: Record<string, unknown>; error?: { message: string; data?: { code?: string } } };

test('a batch of fs/watchMissing cannot pass the per-session watch limit', { timeout: 60_000 }, async (t) => {
  const server = await serverFor(t);
  const workdir = await realpath(await mkdtemp(join(tmpdir(), 'limits-watch-')));
  t.after(() => rm(workdir, { recursive: true, force: true }));
  const s = await sessionFor(t, server.url, { session: { workdir } });
  const batch = Array.from({ length: 40 }, (_, i) => ({
    id: 1000 + i,
    method: 'fs/watchMissing',
    params: { watchId: `w${i}`, missing: [`${workdir}/never-${i}`] },
  }));
  const replies = new Promise<Reply[]>((resolve) => {
    const onMessage = (data: Buffer): void => {
      const parsed = JSON.parse(data.toString('utf8')) as unknown;
      if (!Array.isArray(parsed)) return;
      s.conn.socket.off('message', onMessage);
      resolve(parsed as Reply[]);
    };
    s.conn.socket.on('message', onMessage);
  });
  s.conn.socket.send(JSON.stringify(batch));
  const answers = await replies;
  assert.equal(answers.length, 40);
  const ok = answers.filter((r) => r.result !== undefined);
  const refused = answers.filter((r) => r.error !== undefined);
  assert.equal(ok.length, 16, `watches accepted: ${ok.length}`);
  assert.equal(refused.length, 24);
  for (const r of refused) {
    assert.equal(r.error?.data?.code, 'EXEC_ERR_INVALID_REQUEST');
    assert.match(r.error?.message ?? '', /too many watches in this session \(limit 16\)/);
  }
  // Replacing a watch that exists is still allowed at the limit; one more new id is not. Which
  // 16 of the batch got in depends on the order their awaits resumed, so take one that did.
  const kept = ok[0]?.id;
  assert.ok(kept !== undefined);
  assert.deepEqual(await s.request('fs/watchMissing', { watchId: `w${kept - 1000}`, missing: [`${workdir}/again`] }), {
    watching: true,
  });
  await assert.rejects(
    s.request('fs/watchMissing', { watchId: 'extra', missing: [`${workdir}/x`] }),
    /too many watches in this session/,
  );
});
