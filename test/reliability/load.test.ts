/**
 * 50 clients at once for 30 s on each backend (docs/reliability.md, case S5): each with its own
 * session, starting short commands back to back. No error is allowed; throughput and latency
 * percentiles are reported. RELIABILITY_LOAD_SECONDS shortens or lengthens the run.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BACKENDS } from '../support/backends.ts';
import { startServer, TestSession } from '../support/harness.ts';

const CLIENTS = 50;
const SECONDS = Number(process.env['RELIABILITY_LOAD_SECONDS'] ?? 30);

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

for (const backend of BACKENDS) {
  test(`S5 ${CLIENTS} clients for ${SECONDS} s [${backend}]: no errors; throughput and p99`, {
    timeout: (SECONDS + 240) * 1000,
  }, async (t) => {
    const server = await startServer({ backend, flags: ['--max-sessions-per-tenant', String(CLIENTS + 8)] });
    t.after(() => server.close());
    const sessions = await Promise.all(
      Array.from({ length: CLIENTS }, () =>
        TestSession.open(server.url, { session: { sandbox: { type: 'workspace-write' } } }),
      ),
    );
    t.after(() => Promise.all(sessions.map((s) => s.close())));
    const latencies: number[] = [];
    const errors: string[] = [];
    const until = performance.now() + SECONDS * 1000;
    await Promise.all(
      sessions.map(async (s, c) => {
        for (let i = 0; performance.now() < until; i++) {
          const t0 = performance.now();
          try {
            const r = await s.run(`c${c}-${i}`, ['echo', `${c}-${i}`], { tty: i % 5 === 4 });
            const out = r.stdout + r.pty;
            if (r.exited['exitCode'] !== 0 || !out.includes(`${c}-${i}`))
              errors.push(`client ${c} run ${i}: ${JSON.stringify(r.exited)} ${JSON.stringify(out)}`);
          } catch (err) {
            errors.push(`client ${c} run ${i}: ${(err as Error).message}`);
          }
          latencies.push(performance.now() - t0);
        }
      }),
    );
    latencies.sort((a, b) => a - b);
    const line = `${latencies.length} commands in ${SECONDS} s (${(latencies.length / SECONDS).toFixed(0)}/s), p50 ${percentile(latencies, 50).toFixed(0)} ms, p99 ${percentile(latencies, 99).toFixed(0)} ms, ${errors.length} errors`;
    t.diagnostic(line);
    assert.deepEqual(errors.slice(0, 5), [], line);
    assert.ok(latencies.length >= CLIENTS, line);
  });
}
