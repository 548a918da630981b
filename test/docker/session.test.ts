/**
 * Session containers against a real engine: hardening read back with `docker inspect`,
 * isolation between sessions, delete, snapshots and forks, recovery at startup.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type Docker from 'dockerode';
import type { DockerBackend } from '../../src/backends/docker/index.ts';
import { KEPT_CAPABILITIES } from '../../src/backends/docker/index.ts';
import { GVISOR_PIDS_ALLOWANCE } from '../../src/backends/docker/engine/runtimes.ts';
import { asTenantId } from '../../src/ids.ts';
import { dockerTestOptions, engineReady } from './engine.ts';
import { docker, makeBackend, RecordingSink, sessionSpec, spawnRequest } from './helpers.ts';
import type { BackendSession } from '../../src/backends/types.ts';

let backend: DockerBackend;

before(() => {
  if (engineReady) backend = makeBackend();
});
after(async () => {
  if (engineReady) await backend.close();
});

async function sh(s: BackendSession, script: string): Promise<{ code: number; out: string }> {
  const sink = new RecordingSink();
  await s.spawn(spawnRequest(['sh', '-c', script]), sink);
  const exit = await sink.exited;
  assert.equal(exit.kind, 'exited');
  return { code: exit.kind === 'exited' ? exit.code : -1, out: sink.text() };
}

test('container is hardened (docker inspect)', dockerTestOptions, async () => {
  const spec = sessionSpec({ labels: { team: 'infra' }, resources: { memoryMb: 300, cpus: 0.5, pids: 100 } });
  const s = await backend.createSession(spec);
  assert.ok(s.containerId);
  const [info] = JSON.parse(await docker('inspect', s.containerId!)) as Docker.ContainerInspectInfo[];
  const hc = info!.HostConfig;
  assert.deepEqual(hc.CapDrop, ['ALL']);
  assert.deepEqual([...(hc.CapAdd ?? [])].sort(), [...KEPT_CAPABILITIES].sort());
  assert.deepEqual(hc.SecurityOpt, ['no-new-privileges']);
  assert.equal(hc.Privileged, false);
  assert.equal(hc.NetworkMode, 'none');
  assert.equal(hc.Memory, 300 * 1024 * 1024);
  assert.equal(hc.NanoCpus, 500_000_000);
  // Under gVisor the host limit also covers gVisor's own threads (runtimes.ts).
  assert.equal(hc.PidsLimit, s.runtime === 'runsc' ? 100 + GVISOR_PIDS_ALLOWANCE : 100);
  assert.equal(hc.Init, true);
  const mounts = JSON.stringify([info!.Mounts, hc.Binds]);
  assert.ok(!mounts.includes('docker.sock'), mounts);
  assert.deepEqual(hc.Binds ?? [], []);
  const labels = info!.Config.Labels as Record<string, string>;
  assert.equal(labels['exec-server.session-id'], spec.id);
  assert.equal(labels['exec-server.instance'], backend.options.instanceId);
  assert.equal(labels['exec-server.tenant'], 'alice');
  assert.equal(labels['exec-server.label.team'], 'infra');
  // From inside: exactly the kept capabilities (CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, KILL 5, SETGID 6, SETUID 7 = 0xeb), no network interface but lo, limits.
  const caps = await sh(
    s,
    'grep CapEff /proc/self/status; ls /sys/class/net; cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max',
  );
  assert.match(caps.out, /CapEff:\s+00000000000000eb/);
  assert.equal(caps.out.split('\n')[1], 'lo');
  if (s.runtime === 'runsc') {
    // gVisor shows no cgroup files inside; the limit is on the sandbox's host cgroup, where it
    // counts gVisor's own threads too (docs/docker-backend.md, "Under gVisor").
    assert.match(caps.out, /pids\.max': No such file/);
  } else {
    assert.match(caps.out, /\n100\n/);
  }
  assert.equal(s.sandboxType, 'container-user');
  assert.equal(s.workdir, '/workspace');
  await s.destroy();
});

test('spec.network gives a network; workdir honoured', dockerTestOptions, async () => {
  const s = await backend.createSession(sessionSpec({ network: true, workdir: '/home/work/dir' }));
  const [info] = JSON.parse(await docker('inspect', s.containerId!)) as Docker.ContainerInspectInfo[];
  assert.notEqual(info!.HostConfig.NetworkMode, 'none');
  const r = await sh(s, 'ls -d /home/work/dir && ls /sys/class/net | grep -c eth');
  // runsc is registered with --network=none (docs/docker-backend.md): no interface but lo, even when granted.
  assert.equal(r.out, s.runtime === 'runsc' ? '/home/work/dir\n0\n' : '/home/work/dir\n1\n');
  assert.equal(s.workdir, '/home/work/dir');
  await s.destroy();
});

test('two sessions cannot see each other', dockerTestOptions, async () => {
  const a = await backend.createSession(sessionSpec());
  const b = await backend.createSession(sessionSpec());
  await sh(a, 'echo secret > /workspace/a.txt; echo x > /tmp/a-tmp');
  const r = await sh(b, 'ls -A /workspace /tmp; cat /workspace/a.txt 2>&1; ps -o args');
  assert.ok(!r.out.includes('a-tmp'));
  assert.match(r.out, /No such file/);
  assert.ok(!r.out.includes('secret'));
  await a.destroy();
  await b.destroy();
});

test('destroy removes the container; destroy is idempotent', dockerTestOptions, async () => {
  const s = await backend.createSession(sessionSpec());
  const id = s.containerId!;
  await s.destroy();
  await s.destroy();
  const ps = await docker('ps', '-a', '-q', '--no-trunc', '--filter', `id=${id}`);
  assert.equal(ps.trim(), '');
});

test('snapshot, fork sees the files; list and delete by tenant', dockerTestOptions, async () => {
  const s = await backend.createSession(sessionSpec({ labels: { k: 'v' } }));
  await sh(s, 'echo forked > /workspace/state.txt; mkdir -p /opt/tool && echo 1 > /opt/tool/v');
  const snap = await s.snapshot('base');
  assert.match(snap.snapshotId, /^sha256:/);
  assert.equal(snap.name, 'base');
  const [img] = JSON.parse(await docker('image', 'inspect', snap.snapshotId)) as Docker.ImageInspectInfo[];
  const labels = img!.Config.Labels ?? {};
  assert.equal(labels['exec-server.snapshot'], 'true');
  assert.equal(labels['exec-server.tenant'], 'alice');
  assert.equal(labels['exec-server.snapshot-session'], s.id);
  assert.equal(labels['exec-server.snapshot-name'], 'base');
  assert.ok(labels['exec-server.snapshot-created']);

  const fork = await backend.createSession(sessionSpec({ snapshot: snap.snapshotId }));
  assert.notEqual(fork.containerId, s.containerId);
  const r = await sh(fork, 'cat /workspace/state.txt /opt/tool/v; ls /run/exec-server');
  assert.equal(r.out, 'forked\n1\nr\nu\n');
  // The fork is independent.
  await sh(fork, 'echo changed > /workspace/state.txt');
  assert.equal((await sh(s, 'cat /workspace/state.txt')).out, 'forked\n');

  const mine = await backend.listSnapshots(asTenantId('alice'));
  assert.ok(mine.some((x) => x.snapshotId === snap.snapshotId && x.name === 'base'));
  assert.deepEqual(
    (await backend.listSnapshots(asTenantId('bob'))).filter((x) => x.snapshotId === snap.snapshotId),
    [],
  );
  // Another tenant can neither fork from it nor delete it.
  await assert.rejects(backend.createSession(sessionSpec({ tenant: asTenantId('bob'), snapshot: snap.snapshotId })), {
    code: 'EXEC_ERR_NOT_FOUND',
  });
  await assert.rejects(backend.deleteSnapshot(snap.snapshotId, asTenantId('bob')), { code: 'EXEC_ERR_NOT_FOUND' });
  await fork.destroy();
  await s.destroy();
  await backend.deleteSnapshot(snap.snapshotId, asTenantId('alice'));
  await assert.rejects(backend.deleteSnapshot(snap.snapshotId, asTenantId('alice')), { code: 'EXEC_ERR_NOT_FOUND' });
  // A plain image is not a snapshot.
  await assert.rejects(backend.deleteSnapshot(backend.options.defaultImage, undefined), { code: 'EXEC_ERR_NOT_FOUND' });
});

test('recover: running sessions re-adopted, stopped ones removed', dockerTestOptions, async () => {
  const first = makeBackend();
  const keep = await first.createSession(sessionSpec({ labels: { x: '1' } }));
  const gone = await first.createSession(sessionSpec());
  await sh(keep, 'echo kept > /workspace/k');
  await docker('stop', '-t', '1', gone.containerId!);
  // A second server with the same instance id (a restart): no close() of the first, as after a crash.
  const second = makeBackend({ instanceId: first.options.instanceId });
  const recovered = await second.recover();
  assert.equal(recovered.length, 1);
  const r = recovered[0]!;
  assert.equal(r.session.id, keep.id);
  assert.equal(r.tenant, 'alice');
  assert.deepEqual(r.labels, { x: '1' });
  assert.equal((await sh(r.session, 'cat /workspace/k')).out, 'kept\n');
  assert.equal((await docker('ps', '-a', '-q', '--filter', `id=${gone.containerId!}`)).trim(), '');
  // Another instance's containers are not touched.
  const other = makeBackend();
  assert.deepEqual(await other.recover(), []);
  assert.notEqual((await docker('ps', '-q', '--filter', `id=${keep.containerId!}`)).trim(), '');
  await other.close();
  await second.close();
  await first.close();
});
