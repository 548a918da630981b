/**
 * A preview port whose session's owner is paused (SIGSTOP: it accepts connections and keeps
 * its lease, but answers nothing), reached through another replica: the request, and a
 * WebSocket upgrade, fail with 503 EXEC_ERR_BACKEND_UNAVAILABLE in about 10 s (the owner's
 * /healthz is watched while its answer is awaited) instead of waiting the proxy's idle bound.
 * Once the owner runs again, the port answers through the other replica as before.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { test } from 'node:test';
import { requestJson, createSession } from '../http/helpers.ts';
import { dockerTestOptions } from './engine.ts';
import { Fleet } from './fleet-replicas.ts';

const instanceId = `fleet-preview-paused-${randomUUID().slice(0, 8)}`;
const PORT = 18_090;
const TOKEN = `alice-${randomUUID()}`;
const fleet = new Fleet({
  instanceId,
  flags: () => ['--warm-pool', '0'],
  env: { ...process.env, EXEC_SERVER_TOKENS: `alice:${TOKEN}` },
});

/** A request through the preview proxy: its status, body and how long it took (ms). */
function previewCall(url: string, upgrade: boolean): Promise<{ status: number; body: string; ms: number }> {
  const started = Date.now();
  const headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` };
  if (upgrade)
    Object.assign(headers, {
      connection: 'Upgrade',
      upgrade: 'websocket',
      'sec-websocket-version': '13',
      'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
    });
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, ms: Date.now() - started }));
    });
    req.on('upgrade', (res, socket) => {
      socket.destroy();
      resolve({ status: res.statusCode ?? 0, body: '', ms: Date.now() - started });
    });
    req.on('error', reject);
    req.end();
  });
}

test('a preview port of a paused owner fails in about 10 s through another replica', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  const [a, b] = await fleet.begin(t, 'pa', 'pb');
  t.after(() => a.child.kill('SIGCONT'));
  const { sessionId: id } = await createSession(
    a,
    { sandbox: { type: 'danger-full-access' }, previewPorts: true },
    TOKEN,
  );
  const started = await requestJson<{ exit_code?: number }>(
    `${a.http}/v1/sessions/${id}/exec_command`,
    'POST',
    {
      cmd: `mkdir -p /tmp/www && echo paused-page > /tmp/www/index.html && busybox httpd -p 127.0.0.1:${PORT} -h /tmp/www`,
      login: false,
    },
    TOKEN,
  );
  assert.equal(started.body.exit_code, 0, JSON.stringify(started.body));
  const exposed = await requestJson(`${b.http}/v1/sessions/${id}/ports`, 'POST', { port: PORT }, TOKEN);
  assert.equal(exposed.status, 201, JSON.stringify(exposed.body));
  const url = `${b.http}/v1/sessions/${id}/ports/${PORT}/`;
  const before = await previewCall(url, false);
  assert.deepEqual([before.status, before.body], [200, 'paused-page\n']);

  a.child.kill('SIGSTOP');
  const [page, upgrade] = await Promise.all([previewCall(url, false), previewCall(url, true)]);
  for (const r of [page, upgrade]) {
    assert.equal(r.status, 503, r.body);
    assert.ok(r.ms >= 8_000 && r.ms < 30_000, `answered after ${r.ms} ms`);
  }
  assert.equal((JSON.parse(page.body) as { code?: string }).code, 'EXEC_ERR_BACKEND_UNAVAILABLE');

  a.child.kill('SIGCONT');
  const after = await previewCall(url, false);
  assert.deepEqual([after.status, after.body], [200, 'paused-page\n']);
});
