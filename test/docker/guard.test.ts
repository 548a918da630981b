/**
 * Session tokens and the audit log on the docker backend, across a real restart: a server
 * process is SIGKILLed and its successor (same instance id, tenant tokens and audit log) re-adopts
 * the session. A session token minted by the first still opens the session on the second; the
 * one revoked on the first stays revoked (the revocation is stored with the session's record);
 * the process started and ended in the container, a snapshot taken with the session token and a
 * fork made from it are in the audit log once each, and the log's chain is intact across both
 * servers.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { verifyText } from '../../src/audit/verify.ts';
import type { SessionToken } from '../../src/protocol/index.ts';
import { requestJson } from '../http/helpers.ts';
import { type DevServer, startDevServer } from '../support/dev-server.ts';
import { readToEnd, sleep, TestSession } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';

const TENANT = 'guard-tenant-secret';

/** A server of `instanceId` with the tenant's token and `auditLog`, ready. */
function serve(instanceId: string, auditLog: string): Promise<DevServer> {
  const env = { ...process.env, EXEC_SERVER_TOKENS: `acme:${TENANT}` };
  return startDevServer({ image: TEST_IMAGE, instanceId, flags: ['--audit-log', auditLog], env });
}

test('session tokens survive a restart, revocations too; docker processes are audited once', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 300_000,
}, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'guard-docker-'));
  const auditLog = join(dir, 'audit.jsonl');
  const instanceId = `guard-${process.pid}-${Date.now()}`;
  const first = await serve(instanceId, auditLog);
  let second: DevServer | undefined;
  let snapshotId: string | undefined;
  let forkId: string | undefined;
  // Registered first, so it runs while a server is still up: the fork, then its snapshot image.
  t.after(async () => {
    const base = (second ?? first).http;
    if (forkId !== undefined) await requestJson(`${base}/v1/sessions/${forkId}`, 'DELETE', undefined, TENANT);
    if (snapshotId === undefined) return;
    const url = `${base}/v1/snapshots/${encodeURIComponent(snapshotId)}`;
    const gone = await requestJson(url, 'DELETE', undefined, TENANT).catch((err: unknown) => err);
    if ((gone as { status?: number }).status !== 204) console.error('snapshot not deleted', gone);
  });
  t.after(async () => {
    await first.kill();
    await second?.stop();
  });
  const created = await requestJson<{ sessionId: string }>(`${first.http}/v1/sessions`, 'POST', {}, TENANT);
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.sessionId;
  const mint = async (access: string): Promise<SessionToken> =>
    (await requestJson<SessionToken>(`${first.http}/v1/sessions/${id}/tokens`, 'POST', { access }, TENANT)).body;
  const full = await mint('full');
  const read = await mint('read');
  assert.equal(
    (await requestJson(`${first.http}/v1/sessions/${id}/tokens/${read.tokenId}`, 'DELETE', undefined, TENANT)).status,
    204,
  );

  const s = await TestSession.open(first.url, { resumeSessionId: id }, { token: full.token });
  await s.request('process/start', { processId: 'audited', argv: ['sh', '-c', 'echo in-container; exit 3'] });
  const ran = await readToEnd(s, 'audited', 0, 120_000);
  assert.equal(ran.text, 'in-container\n');
  assert.equal(ran.exitCode, 3);
  // A snapshot by the session token and a fork of it by the tenant.
  const snap = await requestJson<{ snapshotId: string }>(
    `${first.http}/v1/sessions/${id}/snapshots`,
    'POST',
    { name: 'guard-fork' },
    full.token,
  );
  assert.equal(snap.status, 201, JSON.stringify(snap.body));
  snapshotId = snap.body.snapshotId;
  const fork = await requestJson<{ sessionId: string }>(
    `${first.http}/v1/sessions`,
    'POST',
    { snapshot: snap.body.snapshotId },
    TENANT,
  );
  assert.equal(fork.status, 201, JSON.stringify(fork.body));
  forkId = fork.body.sessionId;
  await s.close();
  // The first server is SIGKILLed next: wait until its audit lines are on disk (written in
  // order, in batches, so the fork's session.create, the last one, stands for all of them).
  const forkAudited = async (): Promise<boolean> =>
    (await readFile(auditLog, 'utf8').catch(() => ''))
      .split('\n')
      .some((l) => l.includes('"session.create"') && l.includes(fork.body.sessionId));
  for (const end = Date.now() + 10_000; !(await forkAudited()) && Date.now() < end; ) await sleep(50);
  assert.ok(await forkAudited(), "the fork's session.create is in the audit log");

  await first.kill();
  second = await serve(instanceId, auditLog);

  const info = await requestJson<{ sessionId: string }>(
    `${second.http}/v1/sessions/${id}`,
    'GET',
    undefined,
    full.token,
  );
  assert.equal(info.status, 200, JSON.stringify(info.body));
  const revoked = await requestJson<{ code: string }>(`${second.http}/v1/sessions/${id}`, 'GET', undefined, read.token);
  assert.equal(revoked.status, 401);
  assert.equal(revoked.body.code, 'EXEC_ERR_TOKEN_REVOKED');
  const listing = await requestJson<{ code: string }>(`${second.http}/v1/sessions`, 'GET', undefined, full.token);
  assert.equal(listing.body.code, 'EXEC_ERR_TOKEN_SCOPE');
  const again = await TestSession.open(second.url, { resumeSessionId: id }, { token: full.token });
  t.after(() => again.close());
  const listed = await again.request<{ processes: Array<{ processId: string }> }>('process/list', {});
  assert.ok(listed.processes.some((p) => p.processId === 'audited'));

  const text = await readFile(auditLog, 'utf8');
  const lines = text
    .trim()
    .split('\n')
    .map(
      (l) =>
        JSON.parse(l) as { action: string; session: string | null; principal: string; detail: Record<string, unknown> },
    );
  const mine = (action: string) => lines.filter((l) => l.action === action && l.detail['processId'] === 'audited');
  const starts = mine('process.start');
  assert.equal(starts.length, 1, JSON.stringify(starts));
  assert.deepEqual(starts[0]?.detail['argv'], ['sh', '-c', 'echo in-container; exit 3']);
  assert.equal(starts[0]?.session, id);
  assert.equal(starts[0]?.principal, `session-token:${full.tokenId}`);
  const exits = mine('process.exit');
  assert.equal(exits.length, 1, JSON.stringify(exits));
  assert.equal(exits[0]?.detail['exitCode'], 3);
  const create = lines.find((l) => l.action === 'session.create');
  assert.equal(create?.detail['backend'], 'docker');
  const snapshots = lines.filter((l) => l.action === 'session.snapshot');
  assert.equal(snapshots.length, 1, JSON.stringify(snapshots));
  assert.equal(snapshots[0]?.detail['snapshot'], snap.body.snapshotId);
  assert.equal(snapshots[0]?.principal, `session-token:${full.tokenId}`);
  const forks = lines.filter((l) => l.action === 'session.create' && l.detail['snapshot'] === snap.body.snapshotId);
  assert.equal(forks.length, 1, 'the fork names its snapshot');
  assert.equal(forks[0]?.session, fork.body.sessionId);
  assert.equal(lines.filter((l) => l.action === 'audit.start').length, 2, 'both servers wrote to one chain');
  const verified = verifyText(text);
  assert.equal(verified.ok, true, verified.problem);
  for (const secret of [TENANT, full.token, read.token]) assert.ok(!text.includes(secret));
});
