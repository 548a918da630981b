/**
 * Trust between the replicas of a fleet (docs/security.md): two server processes with one
 * --instance-id and --fleet on one engine. A's advertised URL answers nothing (connection
 * refused), so B's forwards to A fail before a byte is sent while A's lease lives on, and B takes
 * A's session over the moment A is SIGKILLed: the failover path of src/transport/fleet-forward.ts.
 * - A revoked session token, sent to B while A owns its session, is let through B's
 *   authentication (the owner checks revocations) and, once B has taken the session over, is
 *   checked against the session's revocations here: refused (401) and audited by B, the command
 *   never runs.
 * - A client's own `x-exec-server-client` stamp (no valid MAC) does not change the address the
 *   audit log records.
 * - A GET that carries a body is forwarded without it and without its `content-length`: the
 *   connection B keeps to A for every caller stays in step (another tenant's next request is
 *   read as sent).
 * A lone server (no --fleet) has no replica to vouch for anyone: a stamp with a valid MAC, which
 * the holder of its only tenant token can compute (the key derives from the tokens), is ignored.
 */
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request as httpRequest } from 'node:http';
import { test } from 'node:test';
import type { SessionToken } from '../../src/protocol/index.ts';
import { ClientStamp } from '../../src/transport/client-address.ts';
import { requestJson, createSession } from '../http/helpers.ts';
import { spawnDevServer } from '../support/dev-server.ts';
import { freePort } from '../support/free-port.ts';
import { sleep } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';
import { Fleet } from './fleet-replicas.ts';
import { removeInstanceContainers } from './helpers.ts';

const instanceId = `fleet-trust-${randomUUID().slice(0, 8)}`;
const auditDir = mkdtempSync(join(tmpdir(), 'fleet-trust-audit-'));
const ALICE = `alice-${randomUUID()}`;

/** The replicas' environment: `tokens` their tenants (EXEC_SERVER_TOKENS). */
const withTokens = (tokens: string): NodeJS.ProcessEnv => ({ ...process.env, EXEC_SERVER_TOKENS: tokens });
const fleet = new Fleet({
  instanceId,
  flags: (name) => ['--warm-pool', '0', '--audit-log', join(auditDir, `${name}.jsonl`)],
  env: withTokens(`alice:${ALICE}`),
});

interface AuditLine {
  action?: string;
  remote?: string;
  principal?: string;
  detail?: { code?: string; cmd?: unknown };
}

async function auditOf(name: string): Promise<{ text: string; lines: AuditLine[] }> {
  const text = await readFile(join(auditDir, `${name}.jsonl`), 'utf8').catch(() => '');
  const lines = text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as AuditLine);
  return { text, lines };
}

/**
 * The audit of `name` once a line matches `wanted` (for at most 10 s): lines are written in
 * batches after the answer, so one read right after it can come too early under load.
 */
async function auditWith(
  name: string,
  wanted: (l: AuditLine) => boolean,
): Promise<{ text: string; lines: AuditLine[]; line: AuditLine | undefined }> {
  const end = Date.now() + 10_000;
  for (;;) {
    const audit = await auditOf(name);
    const line = audit.lines.find(wanted);
    if (line !== undefined || Date.now() > end) return { ...audit, line };
    await sleep(50);
  }
}

test('a revoked session token stays refused when the replica it reaches takes its session over', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  const nowhere = `http://127.0.0.1:${await freePort()}`;
  t.after(fleet.cleanUp);
  const [a, b] = await Promise.all([fleet.start('a', ['--advertise-url', nowhere]), fleet.start('b')]);
  const { sessionId: id } = await createSession(a, { sandbox: { type: 'danger-full-access' } }, ALICE);
  const minted = await requestJson<SessionToken>(`${a.http}/v1/sessions/${id}/tokens`, 'POST', {}, ALICE);
  assert.equal(minted.status, 201, JSON.stringify(minted.body));
  const { token, tokenId } = minted.body;
  const revoked = await requestJson(`${a.http}/v1/sessions/${id}/tokens/${tokenId}`, 'DELETE', undefined, ALICE);
  assert.equal(revoked.status, 204);
  const onA = await requestJson<{ code: string }>(`${a.http}/v1/sessions/${id}`, 'GET', undefined, token);
  assert.equal(onA.status, 401, 'the owner refuses the revoked token');
  assert.equal(onA.body.code, 'EXEC_ERR_TOKEN_REVOKED');

  // A stamp the client made itself (no valid MAC): the audit names the connection's address.
  const forged = await fetch(`${a.http}/v1/sessions/${id}/exec_command`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${ALICE}`,
      'content-type': 'application/json',
      'x-exec-server-client': `10.9.9.9;${Math.floor(Date.now() / 1000)};${'A'.repeat(43)}`,
    },
    body: JSON.stringify({ cmd: 'echo forged-stamp', login: false }),
  });
  assert.equal(forged.status, 200, await forged.text());
  const started = (
    await auditWith('a', (l) => l.action === 'process.start' && JSON.stringify(l).includes('forged-stamp'))
  ).line;
  assert.equal(started?.remote, '127.0.0.1', 'a forged stamp does not change the audited address');

  // B forwards the revoked token's request to A (refused: nothing is sent), then waits for A's
  // lease to end; A is SIGKILLed meanwhile and B takes the session over.
  const through = requestJson<{ code?: string; output?: string }>(
    `${b.http}/v1/sessions/${id}/exec_command`,
    'POST',
    { cmd: 'echo ran-with-revoked-token', login: false },
    token,
  );
  await sleep(500);
  await a.kill();
  const answer = await through;
  assert.match(b.stderr(), new RegExp(`"sessionId":"${id}"[^\n]*took over a session whose owner is gone`));
  assert.equal(answer.status, 401, `B refuses the revoked token after the take-over: ${JSON.stringify(answer.body)}`);
  assert.equal(answer.body.code, 'EXEC_ERR_TOKEN_REVOKED');
  const refusal = (l: AuditLine): boolean => l.action === 'auth.failure' && l.detail?.code === 'EXEC_ERR_TOKEN_REVOKED';
  const audit = await auditWith('b', refusal);
  assert.doesNotMatch(audit.text, /ran-with-revoked-token/, 'the command never ran');
  const failures = audit.lines.filter(refusal);
  assert.equal(failures.length, 1, `B audits the refusal once: ${audit.text}`);
  assert.equal(failures[0]?.principal, `session-token:${tokenId}`);

  // The tenant token still works on the session B now serves.
  const ok = await requestJson<{ exit_code?: number }>(
    `${b.http}/v1/sessions/${id}/exec_command`,
    'POST',
    { cmd: 'true', login: false },
    ALICE,
  );
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
  assert.equal(ok.body.exit_code, 0);
});

test('a lone server takes no client stamp, not even one its sole tenant computed', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 120_000,
}, async (t) => {
  const lone = `fleet-trust-lone-${randomUUID().slice(0, 8)}`;
  const server = await spawnDevServer({
    image: TEST_IMAGE,
    instanceId: lone,
    flags: ['--warm-pool', '0', '--audit-log', join(auditDir, 'lone.jsonl')],
    env: { ...process.env, EXEC_SERVER_TOKENS: `alice:${ALICE}` },
  });
  t.after(async () => {
    await server.kill();
    await removeInstanceContainers(lone);
  });
  await server.ready();
  const made = await createSession(server, {}, ALICE);
  // The key every replica would share: from the digest of the tenant tokens (src/transport/auth.ts).
  const digest = createHash('sha256').update(`alice:${ALICE}`).digest('hex');
  const res = await fetch(`${server.http}/v1/sessions/${made.sessionId}/exec_command`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${ALICE}`,
      'content-type': 'application/json',
      'x-exec-server-client': new ClientStamp(digest).stamp('10.6.6.6'),
    },
    body: JSON.stringify({ cmd: 'echo computed-stamp', login: false }),
  });
  assert.equal(res.status, 200, await res.text());
  const started = (
    await auditWith('lone', (l) => l.action === 'process.start' && JSON.stringify(l).includes('computed-stamp'))
  ).line;
  assert.equal(started?.remote, '127.0.0.1', 'the audit names the connection, not the stamp');
});

/** A GET that carries a body (`content-length` and all): legal HTTP, if unusual. */
function getWithBody(url: string, token: string, body: string): Promise<number> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const headers = { authorization: `Bearer ${token}`, 'content-length': String(Buffer.byteLength(body)) };
    const req = httpRequest({ host: u.hostname, port: u.port, path: u.pathname, method: 'GET', headers }, (res) =>
      res.resume().once('end', () => resolve(res.statusCode ?? 0)),
    );
    req.once('error', reject);
    req.end(body);
  });
}

test("a forwarded request's body framing leaves the replicas' shared connection as it was", {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  const BOB = `bob-${randomUUID()}`;
  const tokens = withTokens(`alice:${ALICE},bob:${BOB}`);
  t.after(fleet.cleanUp);
  const [a, b] = await Promise.all([fleet.start('fa', [], tokens), fleet.start('fb', [], tokens)]);
  const make = async (token: string): Promise<string> => (await createSession(a, {}, token)).sessionId;
  const [mine, theirs] = [await make(ALICE), await make(BOB)];
  const bobs = async (): Promise<number> =>
    (await requestJson(`${b.http}/v1/sessions/${theirs}`, 'GET', undefined, BOB)).status;
  assert.equal(await bobs(), 200, "B forwards bob's request to A");
  // Alice's GET with a body: B forwards it bodiless. Had B kept its content-length, A would take
  // the start of the next request B sends on that kept-alive connection (bob's) for that body.
  assert.equal(await getWithBody(`${b.http}/v1/sessions/${mine}`, ALICE, 'x'.repeat(64)), 200);
  for (let i = 0; i < 3; i++) assert.equal(await bobs(), 200, `bob's request ${i} after alice's`);
});
