/**
 * Creates that run at once (session-limits.ts `Reservations`) and a client that leaves while
 * its session is being made: the limits hold for the burst, and the orphaned session idles out.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WebSocket } from 'ws';
import { serverWithApi } from './helpers.ts';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

test('creates at once: the tenant quota and the server limit hold exactly; the rest answer 429', async (t) => {
  const flags = ['--tokens', 'a:tok-a,b:tok-b', '--max-sessions-per-tenant', '3', '--max-sessions', '5'];
  const api = await serverWithApi(t, { flags });
  const burst = (token: string, n: number) => Array.from({ length: n }, () => api('POST', '/v1/sessions', {}, token));
  const first = await Promise.all(burst('tok-a', 20));
  assert.equal(first.filter((a) => a.status === 201).length, 3, JSON.stringify(first.map((a) => a.status)));
  for (const a of first.filter((x) => x.status !== 201)) {
    assert.equal(a.status, 429);
    assert.equal(a.body.code, 'EXEC_ERR_SESSION_LIMIT');
  }
  // Tenant b may have 3, the server has room for 2 more: a batch of 2 and singles at once.
  const second = await Promise.all([api('POST', '/v1/sessions?count=2', {}, 'tok-b'), ...burst('tok-b', 6)]);
  const made = second.filter((a) => a.status === 201);
  const sessions = (await api<{ sessions: unknown[] }>('GET', '/v1/sessions', undefined, 'tok-b')).body.sessions;
  assert.equal(sessions.length, 2, JSON.stringify(second.map((a) => a.status)));
  assert.ok(made.length >= 1 && made.length <= 2);
  for (const a of second.filter((x) => x.status !== 201)) assert.equal(a.status, 429, JSON.stringify(a.body));
});

test('a client that closes during initialize leaves a session that is not attached and idles out', async (t) => {
  const api = await serverWithApi(t, { flags: ['--idle-timeout-seconds', '1'] });
  const ws = new WebSocket(api.server.url);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  ws.send(JSON.stringify({ id: 1, method: 'initialize', params: { clientName: 'leaver' } }));
  ws.terminate();
  let sessions: Array<{ sessionId: string; attached: boolean }> = [];
  for (let i = 0; i < 100 && sessions.length === 0; i++) {
    await sleep(50);
    sessions = (await api<{ sessions: typeof sessions }>('GET', '/v1/sessions')).body.sessions;
  }
  assert.equal(sessions.length, 1, 'the session was made');
  assert.equal(sessions[0]?.attached, false, 'nobody is attached');
  const deadline = Date.now() + 20_000;
  while (sessions.length > 0 && Date.now() < deadline) {
    await sleep(250);
    sessions = (await api<{ sessions: typeof sessions }>('GET', '/v1/sessions')).body.sessions;
  }
  assert.equal(sessions.length, 0, 'reaped once idle');
});
