/** The decisions of fleet-wide tenant quotas (src/backends/docker/container/quota-plan.ts). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  freeSlots,
  type SeenSlot,
  STALE_SLOT_MS,
  slotIndex,
  slotName,
  slotPrefix,
  staleSlots,
} from '../../src/backends/docker/container/quota-plan.ts';

const prefix = slotPrefix('prod', 'team-a');
const slot = (index: number, sessionId: string, createdMs = 0, id = `c${index}`): SeenSlot => ({
  id,
  name: `/${prefix}${index}`,
  sessionId,
  createdMs,
});

test('slot names are valid container names, one per instance, tenant and index', () => {
  const DOCKER_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]+$/;
  for (const tenant of ['team-a', 'Ünïcode tenant', 'a/b:c', ''])
    assert.match(slotName('prod', tenant, 7), DOCKER_NAME, tenant);
  assert.notEqual(slotName('prod', 'team-a', 0), slotName('prod', 'team-b', 0));
  assert.notEqual(slotName('prod', 'team-a', 0), slotName('staging', 'team-a', 0));
  assert.notEqual(slotName('prod', 'team-a', 1), slotName('prod', 'team-a', 10));
  assert.equal(slotName('prod', 'team-a', 3), `${prefix}3`);
});

test('slotIndex reads only this tenant and instance, with or without the leading slash', () => {
  assert.equal(slotIndex(`/${prefix}0`, prefix), 0);
  assert.equal(slotIndex(`${prefix}12`, prefix), 12);
  assert.equal(slotIndex(`/${slotPrefix('prod', 'team-b')}0`, prefix), undefined);
  for (const bad of ['', 'x', '01', '-1', '1a', '1234567'])
    assert.equal(slotIndex(`${prefix}${bad}`, prefix), undefined, bad);
});

test('freeSlots: the lowest free indexes below the limit, in order', () => {
  assert.deepEqual(freeSlots(3, [], prefix), [0, 1, 2]);
  assert.deepEqual(freeSlots(3, [slot(1, 's1')], prefix), [0, 2]);
  assert.deepEqual(freeSlots(2, [slot(0, 's0'), slot(1, 's1')], prefix), []);
  // A quota lowered below the slots held: nothing free, the high slots stay until released.
  assert.deepEqual(freeSlots(1, [slot(0, 's0'), slot(1, 's1')], prefix), []);
  // A quota raised: the new indexes are free.
  assert.deepEqual(freeSlots(4, [slot(0, 's0'), slot(1, 's1')], prefix), [2, 3]);
  // Another tenant's slot does not count.
  assert.deepEqual(freeSlots(1, [{ ...slot(0, 'x'), name: `/${slotPrefix('prod', 'b')}0` }], prefix), [0]);
});

test('staleSlots: a slot whose session is gone, once past the margin; never a live one', () => {
  const now = 100_000;
  const slots = [slot(0, 'live', 0), slot(1, 'gone', 0), slot(2, 'gone-just-now', now - STALE_SLOT_MS + 1)];
  const live = new Set(['live']);
  assert.deepEqual(
    staleSlots(slots, live, now).map((s) => s.sessionId),
    ['gone'],
  );
  assert.deepEqual(staleSlots(slots, new Set(['live', 'gone', 'gone-just-now']), now), []);
  // Removal goes by container id: a name taken again in between is another container.
  assert.equal(staleSlots(slots, live, now)[0]?.id, 'c1');
});
