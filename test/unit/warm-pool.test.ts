/** Warm-pool container names (src/backends/docker/container/warm-pool.ts): a claimed name carries its session and tenant. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { claimedName, parseClaimedName } from '../../src/backends/docker/container/warm-pool.ts';

test('claimed names round-trip, with or without the leading slash docker reports', () => {
  for (const tenant of ['', 'default', 'team a/ü', 'x.y']) {
    const name = claimedName('sess-1234', tenant);
    assert.match(name, /^exs\.sess-1234\.[0-9a-f]*$/);
    assert.deepEqual(parseClaimedName(name), { sessionId: 'sess-1234', tenant });
    assert.deepEqual(parseClaimedName(`/${name}`), { sessionId: 'sess-1234', tenant });
  }
});

test('names that are not claimed pool containers are refused', () => {
  for (const name of ['exs.sess', 'exs.a.b.c', '/exec-pool-1', 'exs.s_1.00', 'exs.s.XYZ', 'xexs.s.00'])
    assert.equal(parseClaimedName(name), undefined, name);
});
