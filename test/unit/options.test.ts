/** Docker backend options (src/backends/docker/options.ts): defaults filled in, bounds, the agent window. */
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { test } from 'node:test';
import { agentWindowFor, resolveOptions } from '../../src/backends/docker/options.ts';

const base = { dockerHost: undefined, defaultImage: 'img', instanceId: 'i1' };

test('every default filled in; half the CPUs, at least one', () => {
  const o = resolveOptions(base);
  assert.equal(o.defaultWorkdir, '/workspace');
  assert.equal(o.sandboxUser, '1000:1000');
  assert.deepEqual(o.defaultResources, {
    memoryMb: 2048,
    cpus: Math.max(1, Math.floor(availableParallelism() / 2)),
    pids: 512,
    diskMb: 10_240,
  });
  assert.deepEqual(
    [o.warmPoolSize, o.engineTimeoutMs, o.pingTimeoutMs, o.execPath, o.retentionBytes, o.instanceLeaseWaitMs],
    [0, 5000, 2000, 'agent', 1024 * 1024, 60_000],
  );
  assert.deepEqual([o.allowedRuntimes, o.warmPoolRuntimes], [[], {}]);
});

test('given values are kept; negative sizes and waits become 0; runtimes listed once', () => {
  const o = resolveOptions({
    ...base,
    warmPoolSize: -2,
    instanceLeaseWaitMs: -1,
    defaultResources: { memoryMb: 1, cpus: 2, pids: 3, diskMb: 4 },
    allowedRuntimes: ['runsc', 'runc', 'runsc'],
    execPath: 'exec',
  });
  assert.deepEqual([o.warmPoolSize, o.instanceLeaseWaitMs, o.execPath], [0, 0, 'exec']);
  assert.deepEqual(o.defaultResources, { memoryMb: 1, cpus: 2, pids: 3, diskMb: 4 });
  assert.deepEqual(o.allowedRuntimes, ['runsc', 'runc']);
});

test('agent window: an eighth of the client buffer limit, between 64 KiB and 2 MiB', () => {
  assert.equal(agentWindowFor(8 * 1024 * 1024), 1024 * 1024);
  assert.equal(agentWindowFor(1024), 64 * 1024);
  assert.equal(agentWindowFor(1024 ** 3), 2 * 1024 * 1024);
});
