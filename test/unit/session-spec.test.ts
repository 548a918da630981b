/** Session specs (src/sessions/session-spec.ts): defaults, maxima, and the record a session keeps for recovery. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../../src/config.ts';
import { fromSessionRecord, resolveSessionSpec, sessionRecord } from '../../src/sessions/session-spec.ts';

const config = () => loadConfig(['--max-memory-mb', '2048', '--memory-mb', '512'], {});

test('an empty spec gets every server default', () => {
  const c = config();
  const r = resolveSessionSpec({}, c, 'server');
  assert.deepEqual(r.policy, {
    sandbox: { type: c.sandbox },
    denyRead: [],
    approvalPolicy: c.approvalPolicy,
    strictAutoReview: false,
    denialHandling: 'server',
  });
  assert.deepEqual(r.resources, { memoryMb: 512, cpus: c.cpus, pids: c.pids, diskMb: c.diskMb });
  assert.deepEqual([r.env, r.labels, r.previewPorts], [{}, {}, false]);
  assert.equal(r.idleTimeoutSeconds, c.idleTimeoutSeconds);
});

test('a value over the server maximum is refused naming the field; at the maximum it is kept', () => {
  const c = config();
  assert.throws(() => resolveSessionSpec({ resources: { memoryMb: 4096 } }, c, 'server'), {
    code: 'EXEC_ERR_INVALID_PARAMS',
    message: 'session.resources.memoryMb 4096 exceeds the server maximum 2048',
    detail: { field: 'session.resources.memoryMb' },
  });
  assert.equal(resolveSessionSpec({ resources: { memoryMb: 2048 } }, c, 'server').resources.memoryMb, 2048);
  assert.throws(() => resolveSessionSpec({ idleTimeoutSeconds: c.maxLifetimeSeconds + 1 }, c, 'report'), {
    detail: { field: 'session.idleTimeoutSeconds' },
  });
});

test('file URIs become paths: workdir, writable roots, deny-read; a URI naming a host is refused', () => {
  const r = resolveSessionSpec(
    {
      workdir: 'file:///w/my%20dir',
      sandbox: { type: 'workspace-write', writableRoots: ['file://localhost/cache', '/plain'] },
      denyRead: ['file:///w/secret'],
    },
    config(),
    'server',
  );
  assert.equal(r.workdir, '/w/my dir');
  assert.deepEqual(r.policy.sandbox, { type: 'workspace-write', writableRoots: ['/cache', '/plain'] });
  assert.deepEqual(r.policy.denyRead, ['/w/secret']);
  assert.throws(() => resolveSessionSpec({ workdir: 'file://host/x' }, config(), 'server'), {
    code: 'EXEC_ERR_INVALID_PARAMS',
  });
});

test('the record round-trips every value except env, and ignores later default changes', () => {
  const spec = resolveSessionSpec(
    {
      image: 'alpine:3',
      labels: { team: 'a' },
      env: { SECRET: 'x' },
      approvalPolicy: 'never',
      resources: { cpus: 1 },
      previewPorts: true,
    },
    config(),
    'report',
  );
  const record = sessionRecord(spec);
  assert.ok(!record.includes('SECRET'), 'env values may be secrets: not stored');
  const back = fromSessionRecord(record, loadConfig(['--memory-mb', '256'], {}));
  assert.deepEqual(back, { ...spec, env: {} });
});

test('a missing, foreign or broken record is no spec', () => {
  const c = config();
  const good = JSON.parse(sessionRecord(resolveSessionSpec({}, c, 'server')));
  for (const record of [
    undefined,
    'not json',
    JSON.stringify({ ...good, version: 2 }),
    JSON.stringify({ ...good, denialHandling: 'maybe' }),
    JSON.stringify({ ...good, spec: { resources: { memoryMb: 'lots' } } }),
  ])
    assert.equal(fromSessionRecord(record, c), undefined, String(record));
});
