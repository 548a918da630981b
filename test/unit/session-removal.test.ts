/** A deleted session's teardown is tried again when its backend fails it (session-removal.ts). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { BackendSession, BackendSessionSpec } from '../../src/backends/types.ts';
import { asTenantId } from '../../src/ids.ts';
import type { Logger } from '../../src/logger.ts';
import { type Removal, removeSession } from '../../src/sessions/session-removal.ts';
import { startServer } from '../support/harness.ts';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Waits until `done()` holds, at most 10 s (a loaded machine runs timers late). */
async function until(done: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!done() && Date.now() < deadline) await sleep(10);
}

function recordingLogger(lines: string[]): Logger {
  const log: Logger = {
    info: (_o, msg) => void lines.push(`info ${msg}`),
    warn: (_o, msg) => void lines.push(`warn ${msg}`),
    error: (_o, msg) => void lines.push(`error ${msg}`),
    debug: () => undefined,
    child: () => log,
  };
  return log;
}

/** A removal whose backend fails `failures` times before it succeeds. */
function failing(failures: number, stopping = false): Removal & { calls: string[] } {
  const calls: string[] = [];
  let left = failures;
  const step = async (name: string): Promise<void> => {
    calls.push(name);
    if (left-- > 0) throw new Error('docker engine did not answer within 15000 ms (container remove)');
  };
  return {
    sessionId: 's1',
    calls,
    first: () => step('first'),
    again: () => step('again'),
    done: async () => void calls.push('done'),
    stopping: () => stopping,
  };
}

test('a failed teardown is tried again (the backend alone) until it succeeds, then released', async () => {
  const lines: string[] = [];
  const r = failing(2);
  await removeSession(r, recordingLogger(lines), [10, 10, 10]);
  assert.deepEqual(r.calls, ['first'], 'the caller waits for the first try only');
  await until(() => r.calls.includes('done'));
  assert.deepEqual(r.calls, ['first', 'again', 'again', 'done']);
  assert.deepEqual(lines, [
    'warn session destroy failed; trying again',
    'warn session destroy failed; trying again',
    'info session removed on a later try',
  ]);
});

test('the tries are bounded, and a stopping server leaves the rest to recovery', async () => {
  const lines: string[] = [];
  const r = failing(10);
  await removeSession(r, recordingLogger(lines), [10, 10]);
  await until(() => lines.length === 3);
  assert.deepEqual(r.calls, ['first', 'again', 'again']);
  assert.equal(lines.at(-1), 'error session destroy failed; what is left of it goes at the next start');

  const s = failing(10, true);
  const stopped: string[] = [];
  await removeSession(s, recordingLogger(stopped), [10, 10]);
  await sleep(50); // nothing more may come
  assert.deepEqual(s.calls, ['first']);
  assert.deepEqual(stopped, ['error session destroy failed; what is left of it goes at the next start']);
});

test('a deleted session whose backend fails its removal once is removed on the next try (local backend)', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const tenant = asTenantId('default');
  const session = await server.app.sessions.create({}, { tenant });
  const backend = session.backend;
  const real = backend.destroy.bind(backend);
  let calls = 0;
  let removed = false;
  Object.assign(backend, {
    destroy: async (): Promise<void> => {
      calls++;
      if (calls === 1) throw new Error('engine did not answer in time');
      await real();
      removed = true;
    },
  });
  await server.app.sessions.destroy(session.id, tenant);
  assert.equal(server.app.sessions.find(session.id), undefined, 'gone from the list at once');
  assert.equal(calls, 1);
  await until(() => removed);
  assert.equal(calls, 2, 'tried again, the backend alone');
  assert.ok(removed, 'the second try removed it');
});

test('a create that fails after its container exists removes it, tried again on failure (local backend)', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const tenant = asTenantId('default');
  const backend = server.app.sessions.backend;
  const create = backend.createSession.bind(backend);
  let calls = 0;
  let removed = false;
  Object.assign(backend, {
    createSession: async (spec: BackendSessionSpec): Promise<BackendSession> => {
      const made = await create(spec);
      const real = made.destroy.bind(made);
      return Object.assign(made, {
        enableEgress: async (): Promise<void> => {
          throw new Error('the agent did not open its egress listener');
        },
        destroy: async (): Promise<void> => {
          calls++;
          if (calls === 1) throw new Error('engine did not answer in time');
          await real();
          removed = true;
        },
      });
    },
  });
  await assert.rejects(
    server.app.sessions.create({ network: { allow: ['127.0.0.2:9'] } }, { tenant }),
    /did not open its egress listener/,
  );
  assert.deepEqual(server.app.sessions.list(tenant), [], 'never listed');
  assert.equal(calls, 1, 'the create answered after the first try');
  await until(() => removed);
  assert.equal(calls, 2, 'tried again');
  assert.ok(removed, 'the second try removed it');
});
