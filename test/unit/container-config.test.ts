/** The session container's create options (src/backends/docker/container/container-config.ts): hardening and limits, without an engine. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  buildContainerConfig,
  CONTROL_DIR,
  type ContainerConfigInput,
  cpuShares,
  KEEPALIVE_CMD,
  KEPT_CAPABILITIES,
  LINK_MOUNT,
} from '../../src/backends/docker/container/container-config.ts';

const input = (over: Partial<ContainerConfigInput> = {}): ContainerConfigInput => ({
  name: 'exs-1',
  image: 'img:1',
  labels: { a: 'b' },
  memoryMb: 512,
  cpus: 1.5,
  pids: 256,
  network: false,
  workdir: '/workspace',
  controlTmpfsSize: '1m',
  ...over,
});

test('hardened: all capabilities dropped but the kept few, no new privileges, init, no restart, no logs', () => {
  const c = buildContainerConfig(input());
  const h = c.HostConfig ?? {};
  assert.deepEqual(h.CapDrop, ['ALL']);
  assert.deepEqual(h.CapAdd, [...KEPT_CAPABILITIES]);
  assert.deepEqual(h.SecurityOpt, ['no-new-privileges']);
  assert.equal(h.Privileged, false);
  assert.equal(h.Init, true);
  assert.deepEqual(h.RestartPolicy, { Name: 'no' });
  assert.equal(h.LogConfig?.Type, 'none');
  assert.deepEqual([c.Cmd, c.Entrypoint, c.User, c.Tty], [KEEPALIVE_CMD, [], '0:0', false]);
  assert.match(String(h.Tmpfs?.[CONTROL_DIR]), /noexec.*size=1m$/);
});

test('limits: memory without swap, nano CPUs and their weight, pids; no network unless asked', () => {
  const h = buildContainerConfig(input()).HostConfig ?? {};
  assert.deepEqual(
    [h.Memory, h.MemorySwap, h.NanoCpus, h.CpuShares, h.PidsLimit],
    [512 * 1024 * 1024, 512 * 1024 * 1024, 1_500_000_000, 1536, 256],
  );
  assert.equal(h.NetworkMode, 'none');
  assert.equal(buildContainerConfig(input()).NetworkDisabled, true);
  const net = buildContainerConfig(input({ network: true }));
  assert.deepEqual([net.HostConfig?.NetworkMode, net.NetworkDisabled], ['bridge', false]);
});

test('optional parts appear only when given: runtime, disk size, the agent link mount (read-only)', () => {
  const plain = buildContainerConfig(input()).HostConfig ?? {};
  assert.equal('Runtime' in plain, false);
  assert.equal('StorageOpt' in plain, false);
  assert.deepEqual(plain.Mounts, []);
  const full = buildContainerConfig(input({ runtime: 'runsc', diskMb: 100, agentLinkDir: '/srv/a' })).HostConfig ?? {};
  assert.equal(full.Runtime, 'runsc');
  assert.deepEqual(full.StorageOpt, { size: '100m' });
  assert.deepEqual(full.Mounts, [{ Type: 'bind', Source: '/srv/a', Target: LINK_MOUNT, ReadOnly: true }]);
});

test('cpuShares: 1024 per CPU within the kernel range', () => {
  assert.deepEqual([0.5, 1, 4, 0.0001, 1000].map(cpuShares), [512, 1024, 4096, 2, 262_144]);
});
