/**
 * Placement over a pool of engines (src/backends/docker/engine-pool.ts) with fake engine
 * backends: fewest sessions first, unhealthy engines skipped, snapshots placed where they are,
 * an engine that stops answering passes the session on. The real engines: test/docker/engine-pool.test.ts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EnginePool, engineList, type Member } from '../../src/backends/docker/engine-pool.ts';
import type { DockerBackend } from '../../src/backends/docker/docker-backend.ts';
import type { BackendSession, BackendSessionSpec } from '../../src/backends/types.ts';
import { execError } from '../../src/errors.ts';
import { asTenantId } from '../../src/ids.ts';

interface FakeEngine {
  sessionCount: number;
  ping: () => Promise<void>;
  create: () => Promise<BackendSession>;
  snapshots: string[];
  deleted: string[];
  closed: boolean;
}

function fakeEngine(name: string, sessionCount: number): FakeEngine {
  return {
    sessionCount,
    ping: async () => {},
    create: async () => ({ name }) as unknown as BackendSession,
    snapshots: [],
    deleted: [],
    closed: false,
  };
}

function member(engine: string, f: FakeEngine): Member {
  const backend = {
    get sessionCount() {
      return f.sessionCount;
    },
    ping: () => f.ping(),
    createSession: () => f.create(),
    hasSnapshot: async (id: string) => f.snapshots.includes(id),
    listSnapshots: async () => f.snapshots.map((snapshotId) => ({ snapshotId, createdAt: engine })),
    deleteSnapshot: async (id: string) => {
      if (!f.snapshots.includes(id)) throw execError('EXEC_ERR_NOT_FOUND', `no ${id}`);
      f.deleted.push(id);
    },
    notReadyReason: async () => undefined,
    recover: async () => [],
    close: async () => {
      f.closed = true;
    },
  } as unknown as DockerBackend;
  return { engine, backend, healthy: true, reason: undefined };
}

const quiet = { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} } as never;
const spec = (over: Partial<BackendSessionSpec> = {}) =>
  ({ tenant: asTenantId('default'), ...over }) as unknown as BackendSessionSpec;
const placed = (s: BackendSession) => (s as unknown as { name: string }).name;

function pool(...engines: Array<[string, FakeEngine]>): EnginePool {
  return new EnginePool(
    engines.map(([n, f]) => member(n, f)),
    quiet,
  );
}

/** A fake engine call that fails with `code`, as an engine's client does. */
const failing = (code: Parameters<typeof execError>[0], message: string) => async (): Promise<never> => {
  throw execError(code, message);
};

test('engineList: comma-separated, trimmed, blanks dropped', () => {
  assert.deepEqual(engineList(undefined), []);
  assert.deepEqual(engineList(''), []);
  assert.deepEqual(engineList(' unix:///a.sock , ,tcp://b:2375,'), ['unix:///a.sock', 'tcp://b:2375']);
});

test('a new session goes to the engine with the fewest sessions', async () => {
  const a = fakeEngine('a', 3);
  const b = fakeEngine('b', 1);
  const c = fakeEngine('c', 2);
  const p = pool(['a', a], ['b', b], ['c', c]);
  assert.equal(placed(await p.createSession(spec())), 'b');
  b.sessionCount = 5;
  assert.equal(placed(await p.createSession(spec())), 'c');
  assert.deepEqual(
    p.engines().map((e) => [e.engine, e.healthy, e.sessions]),
    [
      ['a', true, 3],
      ['b', true, 5],
      ['c', true, 2],
    ],
  );
});

test('an engine that does not answer a ping is skipped and reported, until it answers again', async () => {
  const a = fakeEngine('a', 0);
  const b = fakeEngine('b', 4);
  a.ping = failing('EXEC_ERR_BACKEND_UNAVAILABLE', 'connect ECONNREFUSED');
  const p = pool(['a', a], ['b', b]);
  await p.ping();
  assert.deepEqual(p.engines()[0], { engine: 'a', healthy: false, sessions: 0, reason: 'connect ECONNREFUSED' });
  assert.equal(placed(await p.createSession(spec())), 'b');
  assert.match((await p.notReadyReason()) ?? 'ready', /ready/);
  a.ping = async () => {};
  await p.ping();
  assert.equal(p.engines()[0]?.healthy, true);
  assert.equal(placed(await p.createSession(spec())), 'a');
});

test('no engine answers: ping, readiness and placement say so, naming each engine', async () => {
  const a = fakeEngine('a', 0);
  const b = fakeEngine('b', 0);
  for (const f of [a, b]) f.ping = failing('EXEC_ERR_BACKEND_UNAVAILABLE', 'down');
  const p = pool(['a', a], ['b', b]);
  await assert.rejects(p.ping(), { code: 'EXEC_ERR_BACKEND_UNAVAILABLE', message: /a \(down\), b \(down\)/ });
  assert.equal(await p.notReadyReason(), 'no engine of the pool is ready: a: down; b: down');
  await assert.rejects(p.createSession(spec()), { code: 'EXEC_ERR_BACKEND_UNAVAILABLE' });
});

test('an engine that fails a create as unavailable passes the session to the next; other errors stop', async () => {
  const a = fakeEngine('a', 0);
  const b = fakeEngine('b', 1);
  a.create = failing('EXEC_ERR_BACKEND_UNAVAILABLE', 'socket hang up');
  const p = pool(['a', a], ['b', b]);
  assert.equal(placed(await p.createSession(spec())), 'b');
  assert.equal(p.engines()[0]?.healthy, false, 'marked down by the failed call');

  const c = fakeEngine('c', 0);
  const d = fakeEngine('d', 1);
  c.create = failing('EXEC_ERR_INVALID_PARAMS', 'bad image');
  await assert.rejects(pool(['c', c], ['d', d]).createSession(spec()), { code: 'EXEC_ERR_INVALID_PARAMS' });

  const e = fakeEngine('e', 0);
  e.create = failing('EXEC_ERR_BACKEND_UNAVAILABLE', 'gone');
  await assert.rejects(pool(['e', e]).createSession(spec()), { code: 'EXEC_ERR_BACKEND_UNAVAILABLE', message: 'gone' });
});

test('a session from a snapshot goes to an engine holding it, even a busier one', async () => {
  const a = fakeEngine('a', 0);
  const b = fakeEngine('b', 9);
  b.snapshots = ['snap-1'];
  const p = pool(['a', a], ['b', b]);
  assert.equal(placed(await p.createSession(spec({ snapshot: 'snap-1' }))), 'b');
  await assert.rejects(p.createSession(spec({ snapshot: 'snap-2' })), {
    code: 'EXEC_ERR_NOT_FOUND',
    message: /snap-2 is on no healthy engine/,
  });
});

test('snapshots: listed across healthy engines, deleted wherever they are, not found when nowhere', async () => {
  const a = fakeEngine('a', 0);
  const b = fakeEngine('b', 0);
  a.snapshots = ['s1'];
  b.snapshots = ['s2', 's3'];
  const p = pool(['a', a], ['b', b]);
  assert.deepEqual((await p.listSnapshots(undefined)).map((s) => s.snapshotId).sort(), ['s1', 's2', 's3']);
  await p.deleteSnapshot('s3', undefined);
  assert.deepEqual([a.deleted, b.deleted], [[], ['s3']]);
  await assert.rejects(p.deleteSnapshot('nope', undefined), {
    code: 'EXEC_ERR_NOT_FOUND',
    message: 'no snapshot nope',
  });
  await p.close();
  assert.ok(a.closed && b.closed);
});
