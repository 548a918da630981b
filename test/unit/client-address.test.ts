/**
 * The client's address behind a fleet's forwarding (src/transport/client-address.ts): a stamp
 * made with the fleet's key names the address; a forged, altered, stale or foreign stamp names
 * nothing, and the connection's own address counts (a fresh app per case, with `inject`).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Fastify from 'fastify';
import { CLIENT_HEADER, ClientStamp, registerClientAddress } from '../../src/transport/client-address.ts';

const now = 1_800_000_000;

test('a stamp names its address while recent, under the same key only', () => {
  const fleet = new ClientStamp('tenant-tokens-digest');
  const stamp = fleet.stamp('10.1.2.3', now);
  assert.equal(fleet.read(stamp, now + 5), '10.1.2.3');
  assert.equal(new ClientStamp('tenant-tokens-digest').read(stamp, now), '10.1.2.3', 'another replica, same key');
  assert.equal(fleet.read(fleet.stamp('2001:db8::7', now), now), '2001:db8::7');
  assert.equal(fleet.read(stamp, now + 61), undefined, 'stale');
  assert.equal(new ClientStamp('other').read(stamp, now), undefined, 'another key');
  assert.equal(new ClientStamp(undefined).read(new ClientStamp(undefined).stamp('10.0.0.1', now), now), undefined);
  assert.equal(fleet.read(stamp.replace('10.1.2.3', '10.1.2.4'), now), undefined, 'altered address');
  for (const bad of [undefined, '', 'x', ['a', 'b'], `${'1'.repeat(300)};1;x`, '10.0.0.1;abc;def'])
    assert.equal(fleet.read(bad as string | undefined, now), undefined, JSON.stringify(bad));
});

test("the hook: a vouched address counts, a client's own header does not", async (t) => {
  const stamp = new ClientStamp('k');
  const app = Fastify();
  t.after(() => app.close());
  registerClientAddress(app, stamp);
  app.get('/who', async (request) => ({ address: request.clientAddress }));
  const ask = async (headers: Record<string, string>): Promise<string> =>
    (await app.inject({ method: 'GET', url: '/who', headers })).json<{ address: string }>().address;
  assert.equal(await ask({}), '127.0.0.1');
  assert.equal(await ask({ [CLIENT_HEADER]: stamp.stamp('192.0.2.9') }), '192.0.2.9');
  assert.equal(await ask({ [CLIENT_HEADER]: '192.0.2.9;1;AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' }), '127.0.0.1');
  assert.equal(await ask({ [CLIENT_HEADER]: new ClientStamp('not the fleet').stamp('192.0.2.9') }), '127.0.0.1');
});
