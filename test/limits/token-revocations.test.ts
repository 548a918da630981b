/**
 * A session keeps a bounded number of token revocations: minting is free and each revocation
 * is kept (and written with the session's record) until `--session-token-max-ttl-seconds`
 * after it, so without a bound a tenant could grow one session's state for as long as that.
 * The list is filled through `restore` (as a recovered record fills it) rather than by 10000
 * HTTP round trips; the revocation that hits the limit is a real `DELETE`.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { asTenantId } from '../../src/ids.ts';
import type { SessionToken } from '../../src/protocol/index.ts';
import { MAX_TOKEN_REVOCATIONS } from '../../src/sessions/token-revocations.ts';
import { newSession, serverWithApi, type Api } from '../http/helpers.ts';

const ACME = 'tenant-secret-acme';

async function mint(api: Api, id: string): Promise<SessionToken> {
  const r = await api<SessionToken>('POST', `/v1/sessions/${id}/tokens`, {}, ACME);
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body;
}

/** `count` made-up revocations expiring `inSeconds` from now, straight into the session's list. */
function fill(api: Api, id: string, count: number, inSeconds: number): void {
  const exp = Math.floor(Date.now() / 1000) + inSeconds;
  const entries = Array.from({ length: count }, (_, i): [string, number] => [`tok_filler${i}`, exp]);
  api.server.app.sessions.get(id, asTenantId('acme')).tokens.restore(entries);
}

test('a session refuses a revocation past its limit, and says so', { timeout: 60_000 }, async (t) => {
  const api = await serverWithApi(t, { flags: ['--tokens', `acme:${ACME}`] });
  const id = await newSession(api, {}, ACME);
  const first = await mint(api, id);
  assert.equal((await api('DELETE', `/v1/sessions/${id}/tokens/${first.tokenId}`, undefined, ACME)).status, 204);
  fill(api, id, MAX_TOKEN_REVOCATIONS - 1, 3600);

  // Revoking again what is revoked already takes no room: still 204.
  assert.equal((await api('DELETE', `/v1/sessions/${id}/tokens/${first.tokenId}`, undefined, ACME)).status, 204);

  const next = await mint(api, id);
  const refused = await api('DELETE', `/v1/sessions/${id}/tokens/${next.tokenId}`, undefined, ACME);
  assert.equal(refused.status, 429, JSON.stringify(refused.body));
  assert.equal(refused.body.code, 'EXEC_ERR_TOKEN_LIMIT');
  assert.match(
    refused.body.message ?? '',
    new RegExp(`at most ${MAX_TOKEN_REVOCATIONS} revoked tokens until they expire; delete the session`),
  );
  // Refused means not revoked: the token still opens its session.
  assert.equal((await api('GET', `/v1/sessions/${id}`, undefined, next.token)).status, 200);
  assert.equal((await api('GET', `/v1/sessions/${id}`, undefined, first.token)).body.code, 'EXEC_ERR_TOKEN_REVOKED');
});

test('expired revocations do not count against the limit', { timeout: 60_000 }, async (t) => {
  const api = await serverWithApi(t, { flags: ['--tokens', `acme:${ACME}`] });
  const id = await newSession(api, {}, ACME);
  fill(api, id, MAX_TOKEN_REVOCATIONS, -1);
  const token = await mint(api, id);
  assert.equal((await api('DELETE', `/v1/sessions/${id}/tokens/${token.tokenId}`, undefined, ACME)).status, 204);
  assert.equal((await api('GET', `/v1/sessions/${id}`, undefined, token.token)).body.code, 'EXEC_ERR_TOKEN_REVOKED');
});
