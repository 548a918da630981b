/** Signed preview tokens (src/preview/signing.ts): scope (tenant, session, port), expiry, tampering, keys. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PreviewSigner } from '../../src/preview/signing.ts';

const NOW = 1_800_000_000;

test('a token opens its own session and port until it expires, naming its tenant', () => {
  const s = new PreviewSigner('secret');
  const token = s.sign('team-a', 'sess-1', 8080, NOW + 60);
  assert.match(token, /^\d+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/);
  assert.equal(s.verify('sess-1', 8080, token, NOW), 'team-a');
  assert.equal(s.verify('sess-1', 8080, token, NOW + 59), 'team-a');
  assert.equal(s.verify('sess-1', 8080, token, NOW + 60), undefined, 'expired at its expiry');
  assert.equal(s.verify('sess-2', 8080, token, NOW), undefined, 'another session');
  assert.equal(s.verify('sess-1', 8081, token, NOW), undefined, 'another port');
});

test('a token altered in its expiry or tenant, or malformed, opens nothing', () => {
  const s = new PreviewSigner('secret');
  const [exp, tenant, mac] = s.sign('team-a', 'sess-1', 80, NOW + 60).split('.') as [string, string, string];
  const other = Buffer.from('team-b').toString('base64url');
  assert.equal(s.verify('sess-1', 80, `${Number(exp) + 1000}.${tenant}.${mac}`, NOW), undefined);
  assert.equal(s.verify('sess-1', 80, `${exp}.${other}.${mac}`, NOW), undefined);
  const flipped = `${mac.startsWith('A') ? 'B' : 'A'}${mac.slice(1)}`; // the first character: 6 bits of the MAC
  assert.equal(s.verify('sess-1', 80, `${exp}.${tenant}.${flipped}`, NOW), undefined);
  for (const bad of ['', 'x.y.z', `${exp}.${tenant}`, `${exp}.${tenant}.${mac}.x`, `-1.${tenant}.${mac}`])
    assert.equal(s.verify('sess-1', 80, bad, NOW), undefined, bad);
});

test('the same secret verifies across signers; another secret, or none (random), does not', () => {
  const token = new PreviewSigner('shared').sign('t', 's', 1, NOW + 5);
  assert.equal(new PreviewSigner('shared').verify('s', 1, token, NOW), 't');
  assert.equal(new PreviewSigner('other').verify('s', 1, token, NOW), undefined);
  const random = new PreviewSigner(undefined);
  assert.equal(random.verify('s', 1, random.sign('t', 's', 1, NOW + 5), NOW), 't');
  assert.equal(new PreviewSigner(undefined).verify('s', 1, random.sign('t', 's', 1, NOW + 5), NOW), undefined);
});

test('a tenant name with separators and non-ASCII survives the token', () => {
  const s = new PreviewSigner('k');
  const tenant = 'a.b:c/ü';
  assert.equal(s.verify('sess', 3000, s.sign(tenant, 'sess', 3000, NOW + 1), NOW), tenant);
});
