/**
 * What the gVisor suites (test/docker-runsc) share: the session spec on runsc, a server that
 * allows it with one such session, its REST API, and the counter loop they read to see that
 * what ran in a session went on.
 */
import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { type Answer, requestJson } from '../http/helpers.ts';
import { startServer, TestSession, type TestServer } from './harness.ts';

/** A session under gVisor with nothing in the way (no sandbox, no approvals). */
export const GVISOR = { runtime: 'runsc', sandbox: { type: 'danger-full-access' }, approvalPolicy: 'never' };

/** A docker server started with `flags` (by default: runsc allowed) and a gVisor session on it; both end with the test. */
export async function gvisorSession(
  t: TestContext,
  flags: readonly string[] = ['--allowed-runtimes', 'runsc'],
): Promise<{ server: TestServer; s: TestSession }> {
  const server = await startServer({ backend: 'docker', flags: [...flags] });
  t.after(() => server.close());
  const s = await TestSession.open(server.url, { session: GVISOR });
  t.after(() => s.close());
  return { server, s };
}

/** One REST call to `server` (JSON both ways, no token). */
export function http(
  server: TestServer,
  method: string,
  path: string,
  body?: unknown,
): Promise<Answer<Record<string, unknown>>> {
  return requestJson<Record<string, unknown>>(`${server.httpUrl}${path}`, method, body);
}

/** The value a counter loop last wrote to `file` in the session (command id `id`). */
export async function readCounter(s: TestSession, id: string, file: string): Promise<number> {
  // Read again a moment later when empty: the loop rewrites the file, and a read can fall
  // between truncate and write; and under load its first write can come late (up to 2 s here).
  const r = await s.run(id, [
    'sh',
    '-c',
    `n=0; while [ $n -lt 100 ]; do v=$(cat ${file} 2>/dev/null); [ -n "$v" ] && { echo "$v"; exit 0; }; sleep 0.02; n=$((n+1)); done; exit 1`,
  ]);
  assert.equal(r.exited['exitCode'], 0, r.stderr);
  return Number(r.stdout.trim());
}
