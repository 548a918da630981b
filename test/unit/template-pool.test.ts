/**
 * Pools filled from live templates (src/backends/docker/checkpoints/template-pool.ts) against a
 * fake engine: a pool fills once its template exists, follows a newer template of that name,
 * hands a container only to a session made like it (the template's network, default resources,
 * the checkpointing runtime), and lets its containers go before its template is deleted.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { asSessionId, asTenantId } from '../../src/ids.ts';
import type { BackendSessionSpec, SnapshotInfo } from '../../src/backends/types.ts';
import type { CheckpointMeta, CheckpointStore } from '../../src/backends/docker/checkpoints/checkpoint-store.ts';
import { TemplatePools, type TemplatePoolHost } from '../../src/backends/docker/checkpoints/template-pool.ts';
import { LABEL } from '../../src/backends/docker/container/labels.ts';
import type { RuntimeResolver } from '../../src/backends/docker/engine/runtimes.ts';
import { resolveOptions } from '../../src/backends/docker/options.ts';
import { silentLogger } from '../../src/logger.ts';

const options = resolveOptions({ defaultImage: 'img', instanceId: 'test', warmPoolTemplates: { warm: 2 } });

function fakeHost() {
  const templates: SnapshotInfo[] = [];
  const meta = new Map<string, CheckpointMeta>();
  const containers = new Map<string, string>(); // container id -> image
  let next = 0;
  const host: TemplatePoolHost = {
    docker: {
      getImage: (id: string) => ({
        inspect: async () => ({ Id: id, Config: { Labels: { [LABEL.snapshot]: 'true' } } }),
      }),
    } as never,
    options,
    runtimes: {
      engine: async () => ({
        engineDefault: 'runc',
        paths: { runc: 'runc', runsc: '/usr/bin/runsc' },
        experimental: true,
      }),
      allowed: async () => ['runc', 'runsc'],
    } as unknown as RuntimeResolver,
    store: {
      has: async (id: string) => meta.has(id),
      meta: async (id: string) => meta.get(id) ?? {},
    } as unknown as CheckpointStore,
    log: silentLogger,
    listSnapshots: async () => templates,
    provision: async (p) => {
      const id = `c${next++}`;
      containers.set(id, p.image);
      return { containerId: id, shellPath: '/bin/sh', baseEnv: {} };
    },
    remove: async (id) => void containers.delete(id),
    rename: async () => undefined,
  };
  const add = (id: string, network: boolean): void => {
    templates.push({ snapshotId: id, name: 'warm', createdAt: `${templates.length}`, memory: true });
    meta.set(id, { network });
  };
  return { host, add, containers };
}

function spec(over: Partial<BackendSessionSpec> = {}): BackendSessionSpec {
  return {
    id: asSessionId('s1'),
    tenant: asTenantId('t'),
    labels: {},
    resources: options.defaultResources,
    network: true,
    sandboxed: false,
    ...over,
  } as BackendSessionSpec;
}

async function until(ok: () => boolean): Promise<void> {
  for (let i = 0; !ok(); i++) {
    assert.ok(i < 200, 'timed out');
    await new Promise((r) => setTimeout(r, 5));
  }
}

test('a template pool fills, follows its template, claims like containers only, releases', async (t) => {
  const { host, add, containers } = fakeHost();
  const pools = new TemplatePools({ warm: 2 }, host);
  t.after(() => pools.close());
  await pools.start();
  assert.deepEqual(pools.readyContainers(), [], 'no template yet');

  add('sha256:a', true);
  pools.refill();
  await until(() => pools.readyContainers('warm').length === 2);
  assert.deepEqual([...containers.values()], ['sha256:a', 'sha256:a']);

  // Not like the pool's containers: another runtime, network, resources or labels.
  assert.equal(await pools.claim(spec(), 'sha256:a', 'runc'), undefined);
  assert.equal(await pools.claim(spec({ network: false }), 'sha256:a', 'runsc'), undefined);
  assert.equal(await pools.claim(spec({ labels: { a: 'b' } }), 'sha256:a', 'runsc'), undefined);
  const mem = { ...options.defaultResources, memoryMb: 1 };
  assert.equal(await pools.claim(spec({ resources: mem }), 'sha256:a', 'runsc'), undefined);
  assert.equal(await pools.claim(spec(), 'sha256:other', 'runsc'), undefined);
  const claimed = await pools.claim(spec(), 'sha256:a', 'runsc');
  assert.ok(claimed, 'a session like the template takes one');
  assert.ok(!pools.readyContainers().includes(claimed.containerId));
  await until(() => pools.readyContainers().length === 2);

  // A newer template of the name: the pool's containers are replaced.
  add('sha256:b', true);
  pools.refill();
  await until(() => [...containers.values()].filter((i) => i === 'sha256:b').length === 2);
  await until(() => pools.readyContainers().length === 2);
  assert.deepEqual(
    [...containers.entries()].filter(([id]) => id !== claimed.containerId).map(([, i]) => i),
    ['sha256:b', 'sha256:b'],
  );

  // Deleting the template: its containers go first, and it is not filled from again.
  let seen: string[] = ['x'];
  await pools.whileReleased('sha256:b', undefined, async () => {
    seen = pools.readyContainers();
  });
  assert.deepEqual(seen, [], 'no container left when the image is deleted');
  pools.refill();
  await new Promise((r) => setTimeout(r, 30));
  assert.deepEqual(pools.readyContainers(), []);
});
