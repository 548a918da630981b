/**
 * The exec agent's volume per build (src/backends/docker/agent/agent-volume.ts), against a real
 * engine: once its own is ready, a server removes the other builds' volumes that nothing mounts
 * (each with its marker, and markers left without their volume), keeps one a live server's
 * instance lease mounts, and fills its own again when its volume is newer than its marker. Each
 * "build" is a copy of build/exec-agent with a different tail, so each has a volume of its own.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { appendFile, copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import Docker from 'dockerode';
import { AgentVolume } from '../../src/backends/docker/agent/agent-volume.ts';
import { AGENT_BINARY } from '../../src/backends/docker/agent/agent-install.ts';
import { InstanceLease } from '../../src/backends/docker/engine/instance-lease.ts';
import { silentLogger } from '../../src/logger.ts';
import { sleep } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';
import { docker } from './helpers.ts';

const engine = new Docker();

async function volumes(): Promise<Set<string>> {
  return new Set((await docker('volume', 'ls', '-q')).split('\n').filter(Boolean));
}

/** A logger that keeps the messages of `info` (the fill says "exec agent volume ready"). */
function recording(): { log: typeof silentLogger; said: string[] } {
  const said: string[] = [];
  const log = { ...silentLogger, info: (_o: unknown, msg?: string) => void said.push(String(msg)) };
  return { log: log as typeof silentLogger, said };
}

test('agent volumes: other builds swept unless mounted, a volume newer than its marker filled again', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 120_000,
}, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'agent-volume-'));
  const build = async (tag: string): Promise<string> => {
    const path = join(dir, tag);
    await copyFile(AGENT_BINARY, path);
    await appendFile(path, `\n${tag}-${randomUUID()}\n`);
    return path;
  };
  const [stale, pinned, current] = await Promise.all([build('stale'), build('pinned'), build('current')]);
  const made: string[] = [];
  const volumeOf = async (binary: string, log = silentLogger): Promise<string> => {
    const name = await new AgentVolume(engine, binary, 10_000, log).get(TEST_IMAGE);
    assert.ok(name, 'the volume is made');
    made.push(name, `${name}-complete`);
    return name;
  };
  const lease = new InstanceLease(
    engine,
    {
      instanceId: `agent-volume-${randomUUID()}`,
      waitMs: 1000,
      timeoutMs: 10_000,
      pinVolume: () => new AgentVolume(engine, pinned, 10_000, silentLogger).pin(),
    },
    silentLogger,
  );
  t.after(async () => {
    await lease.release();
    for (const v of made) await docker('volume', 'rm', '-f', v).catch(() => '');
    await rm(dir, { recursive: true, force: true });
  });

  const staleName = await volumeOf(stale);
  // A live server of the "pinned" build: its lease mounts that build's volume (made empty by the mount).
  await lease.acquire(TEST_IMAGE);
  const pinnedName = (await new AgentVolume(engine, pinned, 10_000, silentLogger).pin())?.name ?? '';
  made.push(pinnedName, `${pinnedName}-complete`);
  const orphanMarker = `exec-server-agent-orphan-${randomUUID().slice(0, 8)}-complete`;
  made.push(orphanMarker);
  await docker('volume', 'create', '--label', 'exec-server.agent=true', orphanMarker);
  assert.ok((await volumes()).has(pinnedName), "the lease's mount made the pinned build's volume");

  const sweeper = new AgentVolume(engine, current, 10_000, silentLogger);
  const currentName = await sweeper.get(TEST_IMAGE);
  assert.ok(currentName);
  made.push(currentName, `${currentName}-complete`);
  await sweeper.swept;
  let left = await volumes();
  assert.ok(!left.has(staleName) && !left.has(`${staleName}-complete`), 'the unused build is gone, marker too');
  assert.ok(!left.has(orphanMarker), 'a marker without its volume is gone');
  assert.ok(left.has(pinnedName), "the volume a live server's lease mounts stays");
  assert.ok(left.has(currentName) && left.has(`${currentName}-complete`), 'its own stays');

  // That server gone, the next sweep takes its volume.
  await lease.release();
  await sleep(500);
  const next = new AgentVolume(engine, current, 10_000, silentLogger);
  assert.equal(await next.get(TEST_IMAGE), currentName);
  await next.swept;
  left = await volumes();
  assert.ok(!left.has(pinnedName), 'unmounted now, swept');

  // Its volume removed and made again empty (by a mount, after a sweep): newer than the marker, filled again.
  await docker('volume', 'rm', currentName);
  await sleep(1100);
  await docker('volume', 'create', '--label', 'exec-server.agent=true', currentName);
  const { log, said } = recording();
  assert.equal(await new AgentVolume(engine, current, 10_000, log).get(TEST_IMAGE), currentName);
  assert.ok(said.includes('exec agent volume ready'), `filled again: ${said.join('; ')}`);
  const again = recording();
  await new AgentVolume(engine, current, 10_000, again.log).get(TEST_IMAGE);
  assert.ok(!again.said.includes('exec agent volume ready'), 'and trusted after that');
});
