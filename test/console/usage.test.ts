/**
 * Resource use per session (`session/info.usage`, `GET /v1/sessions/:id`, `?usage=true` on the
 * list) on both backends, measured on a real busy command and its child.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { dockerTestOptions } from '../docker/engine.ts';
import type { BackendKind } from '../support/harness.ts';

// Loaded after the engine check: evaluated beside it, the server's modules can delay its 3 s
// ping past its deadline on a busy machine.
const { parseStat } = await import('../../src/backends/local/process-stats.ts');
const { startServer, TestSession } = await import('../support/harness.ts');

test('parseStat counts fields from the last parenthesis (names may hold spaces and parentheses)', () => {
  const line =
    '4242 (a b) c)) S 17 4242 4242 0 -1 4194304 100 0 0 0 250 50 7 3 20 0 1 0 12345 1000000 200 18446744073709551615';
  assert.deepEqual(parseStat(4242, line), { pid: 4242, ppid: 17, ticks: 250 + 50 + 7 + 3 });
  assert.equal(parseStat(1, 'garbage'), undefined);
});

async function measure(kind: BackendKind): Promise<void> {
  const server = await startServer({ backend: kind });
  try {
    const s = await TestSession.open(server.url, { session: { sandbox: { type: 'danger-full-access' } } });
    try {
      // A shell that keeps one CPU busy and holds a sleeping child: at least two processes.
      await s.request('process/start', {
        processId: 'busy',
        argv: ['sh', '-c', 'sleep 60 & while :; do :; done'],
        tty: false,
      });
      const first = (await s.request<{ usage: Record<string, number | null> | null }>('session/info')).usage;
      assert.ok(first, 'session/info carries usage');
      await new Promise((r) => setTimeout(r, 1200));
      const info = await s.request<{ usage: Record<string, number | null> }>('session/info');
      const usage = info.usage;
      assert.ok((usage['pids'] ?? 0) >= 2, `pids ${usage['pids']}`);
      assert.ok((usage['memoryBytes'] ?? 0) > 0, `memory ${usage['memoryBytes']}`);
      assert.ok((usage['cpuSeconds'] ?? 0) > 0.05, `cpu seconds ${usage['cpuSeconds']}`);
      // One CPU spinning: clearly above idle (how far depends on the machine's load), never more
      // than one CPU beyond sampling jitter.
      const busy = usage['cpuPercent'] ?? 0;
      assert.ok(busy > 5 && busy < 150, `cpu percent ${busy}`);
      if (kind === 'docker') {
        assert.ok((usage['memoryLimitBytes'] ?? 0) > 0, 'the container limit is reported');
        assert.ok((usage['pidsLimit'] ?? 0) > 0, 'the pids limit is reported');
      }

      const one = await fetch(`${server.httpUrl}/v1/sessions/${s.sessionId}`).then(
        (r) => r.json() as Promise<{ usage: { pids: number } }>,
      );
      assert.ok(one.usage.pids >= 2, 'GET /v1/sessions/:id carries usage');
      const plain = await fetch(`${server.httpUrl}/v1/sessions`).then(
        (r) => r.json() as Promise<{ sessions: Array<{ usage?: unknown }> }>,
      );
      assert.equal(plain.sessions[0]?.usage, undefined, 'the plain list asks no backend for stats');
      const listed = await fetch(`${server.httpUrl}/v1/sessions?usage=true`).then(
        (r) => r.json() as Promise<{ sessions: Array<{ usage: { pids: number } }> }>,
      );
      assert.ok((listed.sessions[0]?.usage.pids ?? 0) >= 2, '?usage=true adds it to the list');

      await s.request('process/terminate', { processId: 'busy' });
      const deadline = Date.now() + 10_000;
      let after = usage;
      while (Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 300));
        after = (await s.request<{ usage: Record<string, number | null> }>('session/info')).usage;
        if ((after['cpuPercent'] ?? 100) < Math.min(5, busy / 2)) break;
      }
      assert.ok(
        (after['cpuPercent'] ?? 100) < Math.min(5, busy / 2),
        `cpu falls once the command ends: ${busy} -> ${after['cpuPercent']}`,
      );
    } finally {
      s.conn.close();
    }
  } finally {
    await server.close();
  }
}

test('local: usage follows the process trees of the running commands', { timeout: 60_000 }, () => measure('local'));
test('docker: usage comes from the engine stats of the container', dockerTestOptions, () => measure('docker'));
