/** Recovery tags of processes that survive the server (src/processes/recovery.ts): round trip, versions, defaults. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { asProcessId } from '../../src/ids.ts';
import { decodeRecoveryTag, encodeRecoveryTag, type RecoveryTag } from '../../src/processes/recovery.ts';

const tag: RecoveryTag = {
  processId: asProcessId('proc-1'),
  argv: ['bash', '-c', 'sleep 1'],
  cwd: '/w',
  mode: 'pty',
  createdAt: 1_700_000_000_000,
  timeoutAt: 1_700_000_060_000,
  seqBase: 42,
  sandboxed: true,
};

test('a tag round-trips, versioned', () => {
  const text = encodeRecoveryTag(tag);
  assert.equal(JSON.parse(text).v, 1);
  assert.deepEqual(decodeRecoveryTag(text), tag);
});

test('tags of another version, broken ones and unknown modes are not ours', () => {
  const base = JSON.parse(encodeRecoveryTag(tag));
  for (const bad of [
    'not json',
    JSON.stringify({ ...base, v: 2 }),
    JSON.stringify({ ...base, processId: 5 }),
    JSON.stringify({ ...base, argv: 'bash' }),
    JSON.stringify({ ...base, cwd: undefined }),
    JSON.stringify({ ...base, mode: 'tty' }),
  ])
    assert.equal(decodeRecoveryTag(bad), undefined, bad);
});

test('missing optional fields get defaults: now, no timeout, seq 1, unsandboxed', () => {
  const before = Date.now();
  const t = decodeRecoveryTag(JSON.stringify({ v: 1, processId: 'p', argv: [1, 'x'], cwd: '/', mode: 'pipe' }));
  assert.ok(t);
  assert.deepEqual([t.argv, t.timeoutAt, t.seqBase, t.sandboxed], [['1', 'x'], undefined, 1, false]);
  assert.ok(t.createdAt >= before);
});
