/**
 * A re-adopted session keeps its idle clock (docs/architecture.md, "The reaper"): the server
 * notes a used session to its exec agent (NOTE), and a server that re-adopts it (after a restart
 * or a fleet take-over) counts its idle time from there instead of starting a whole timeout again.
 */
import assert from 'node:assert/strict';
import { type TestContext, test } from 'node:test';
import { NOTE_ACTIVITY_MS } from '../../src/sessions/session.ts';
import { startDevServer } from '../support/dev-server.ts';
import { sleep } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';
import { makeBackend, RecordingSink, sessionSpec, spawnRequest } from './helpers.ts';

test('the agent gives back when the session was last noted used', dockerTestOptions, async (t) => {
  const first = makeBackend();
  const second = makeBackend({ instanceId: first.options.instanceId });
  t.after(async () => {
    await second.close();
    await first.close();
  });
  const started = Date.now();
  const quiet = await first.createSession(sessionSpec());
  const used = await first.createSession(sessionSpec());
  const sink = new RecordingSink();
  await used.spawn(spawnRequest(['true']), sink);
  await sink.exited;
  await sleep(2500);
  used.noteActivity?.();
  const notedAt = Date.now();
  await sleep(2000);
  // A second server with the same instance id (a restart: the first is not closed, as after a crash).
  const recovered = await second.recover();
  const at = new Map<string, number | undefined>();
  for (const r of recovered) {
    await r.adoptProcesses?.(() => undefined);
    at.set(r.session.id, r.notedAt?.());
  }
  const usedAt = at.get(used.id);
  assert.ok(usedAt !== undefined, 'the agent said when the session was noted used');
  // Within 1 s: the NOTE reaches the agent after a loaded moment at worst, and the wrong answers
  // (the agent's start, or the recovery) lie 2 s or more away from the note.
  assert.ok(Math.abs(usedAt - notedAt) < 1000, `noted ${usedAt - notedAt} ms from the note`);
  // Never noted: since its agent started (the session's creation), not since the recovery.
  const quietAt = at.get(quiet.id);
  assert.ok(quietAt !== undefined && quietAt >= started - 500 && quietAt < notedAt - 2000, `${quietAt} vs ${started}`);
});

async function sessionExists(http: string, id: string): Promise<boolean> {
  const res = await fetch(`${http}/v1/sessions/${id}`);
  await res.body?.cancel();
  return res.status === 200;
}

async function waitGone(http: string, id: string, ms: number): Promise<number> {
  const start = Date.now();
  while (Date.now() - start < ms && (await sessionExists(http, id))) await sleep(250);
  return Date.now() - start;
}

test('a restarted server reaps an idle session when its idle timeout is due, not a whole timeout after the restart', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 120_000,
}, async (t: TestContext) => {
  const IDLE_S = 10;
  const instanceId = `idle-clock-${process.pid}-${Date.now()}`;
  const first = await startDevServer({ image: TEST_IMAGE, instanceId });
  let second: Awaited<ReturnType<typeof startDevServer>> | undefined;
  t.after(async () => {
    await first.kill();
    await second?.stop();
  });
  const res = await fetch(`${first.http}/v1/sessions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ idleTimeoutSeconds: IDLE_S }),
  });
  assert.equal(res.status, 201);
  const id = ((await res.json()) as { sessionId: string }).sessionId;
  const exec = await fetch(`${first.http}/v1/sessions/${id}/exec_command`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ cmd: 'true' }),
  });
  assert.equal(exec.status, 200, await exec.text());
  const lastUse = Date.now();
  await first.kill();
  // The successor starts after more than the idle timeout less the note's slack has passed.
  await sleep(Math.max(0, lastUse + IDLE_S * 1000 + 2000 - Date.now()));
  second = await startDevServer({ image: TEST_IMAGE, instanceId });
  const restartedAt = Date.now();
  // The last use was over IDLE_S ago, so the session is due by lastUse + IDLE_S + the slack:
  // reaped by the next passes of the reaper (every 5 s), well before IDLE_S after the restart.
  const due = lastUse + IDLE_S * 1000 + NOTE_ACTIVITY_MS - restartedAt;
  const waited = await waitGone(second.http, id, 30_000);
  assert.ok(waited < 30_000, 'the session was reaped');
  assert.ok(
    waited < IDLE_S * 1000 - 1000,
    `reaped ${waited} ms after the restart (due ${due} ms after it; a restarted clock gives ${IDLE_S * 1000} + up to 5000)`,
  );
  assert.ok(Date.now() - lastUse >= IDLE_S * 1000, 'never before its idle timeout from the last use');
});
