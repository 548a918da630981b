/**
 * FleetRouter (src/sessions/fleet-router.ts) after losing a take-over: the replica that claimed
 * the session first serves it, even while its claim is not listed yet (the engine answers the
 * losing create's 409 before it lists the winner's claim). A fake fleet stands in for the
 * engine's listings; the real race is in test/docker/fleet-kills.test.ts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { FleetBackend, FleetLocation } from '../../src/backends/fleet-types.ts';
import { asTenantId } from '../../src/ids.ts';
import { FleetRouter } from '../../src/sessions/fleet-router.ts';

const tenant = asTenantId('acme');
const WINNER: FleetLocation = { kind: 'remote', replicaId: 'd', url: 'http://127.0.0.1:9/' };

/** A fleet whose `locate` answers `answers` in turn (the last one from then on). */
function fleetAnswering(answers: FleetLocation[]): { fleet: FleetBackend; looks: () => number } {
  let looks = 0;
  const locate = async (): Promise<FleetLocation> => answers[Math.min(looks++, answers.length - 1)] ?? WINNER;
  return { fleet: { locate } as unknown as FleetBackend, looks: () => looks };
}

function router(fleet: FleetBackend): FleetRouter {
  return new FleetRouter({
    fleet,
    local: () => undefined,
    adopt: async () => undefined, // another replica's claim came first
    closing: () => false,
  });
}

test("a lost take-over routes to the winner once its claim is listed, not 'absent'", async () => {
  const orphan: FleetLocation = { kind: 'orphan' };
  const { fleet, looks } = fleetAnswering([orphan, orphan, orphan, WINNER]);
  const route = await router(fleet).route('s1', tenant);
  assert.deepEqual(route, { kind: 'remote', replicaId: 'd', url: 'http://127.0.0.1:9/' });
  assert.equal(looks(), 4);
});

test('a session removed meanwhile is absent at once', async () => {
  const { fleet, looks } = fleetAnswering([{ kind: 'orphan' }, { kind: 'absent' }]);
  assert.deepEqual(await router(fleet).route('s1', tenant), { kind: 'absent' });
  assert.equal(looks(), 2);
});

test('a claim that never shows is a retryable 503, not a 404', async () => {
  const { fleet } = fleetAnswering([{ kind: 'orphan' }]);
  await assert.rejects(router(fleet).route('s1', tenant), (err: Error & { code?: string }) => {
    assert.equal(err.code, 'EXEC_ERR_BACKEND_UNAVAILABLE');
    assert.match(err.message, /being taken over by another replica/);
    return true;
  });
});
