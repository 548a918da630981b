/** Session runtimes (src/backends/docker/engine/runtimes.ts): gVisor detection, checkpoint support, resolution against a fake engine. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type Docker from 'dockerode';
import { checkpointUnsupportedReason, isGvisor, RuntimeResolver } from '../../src/backends/docker/engine/runtimes.ts';

/** An engine whose `info` answers `runtimes` (mutable) and counts the calls. */
function fakeDocker(runtimes: Record<string, { path?: string }>, defaultRuntime = 'runc') {
  const state = { calls: 0, fail: false };
  const docker = {
    info: async () => {
      state.calls += 1;
      if (state.fail) throw Object.assign(new Error('refused'), { code: 'ECONNREFUSED' });
      return { DefaultRuntime: defaultRuntime, Runtimes: runtimes, ExperimentalBuild: true };
    },
  } as unknown as Docker;
  return { docker, state };
}

test('isGvisor: runsc or its wrapper under any directory, nothing else', () => {
  for (const p of ['runsc', '/usr/local/bin/runsc', '/opt/x/runsc-runtime']) assert.equal(isGvisor(p), true, p);
  for (const p of [undefined, 'runc', '/usr/bin/runsc2', 'myrunsc', '/bin/runsc/x'])
    assert.equal(isGvisor(p), false, p);
});

test('checkpoints: only gVisor, and only on an experimental engine', () => {
  const engine = { engineDefault: 'runc', paths: { runc: 'runc', gv: '/usr/bin/runsc' }, experimental: true };
  assert.equal(checkpointUnsupportedReason(engine, 'gv'), undefined);
  assert.match(checkpointUnsupportedReason(engine, 'runc') ?? '', /runc cannot checkpoint.*CRIU/);
  assert.match(checkpointUnsupportedReason(engine, 'missing') ?? '', /missing cannot checkpoint/);
  assert.match(checkpointUnsupportedReason({ ...engine, experimental: false }, 'gv') ?? '', /experimental mode/);
});

test('the default is --runtime, else the engine default; allowed adds it to the allow-list once', async () => {
  const { docker } = fakeDocker({ runc: {}, runsc: { path: '/usr/bin/runsc' } }, 'runc');
  assert.equal(await new RuntimeResolver(docker, undefined, [], 1000).defaultRuntime(), 'runc');
  const r = new RuntimeResolver(docker, 'runsc', ['runc', 'runsc'], 1000);
  assert.equal(await r.defaultRuntime(), 'runsc');
  assert.deepEqual(await r.allowed(), ['runsc', 'runc']);
  const engine = await r.engine();
  assert.deepEqual(engine.paths, { runc: 'runc', runsc: '/usr/bin/runsc' });
});

test('resolve: not allowed is invalid params; allowed but unregistered is asked again, then a config error', async () => {
  const runtimes: Record<string, { path?: string }> = { runc: {} };
  const { docker, state } = fakeDocker(runtimes);
  const r = new RuntimeResolver(docker, undefined, ['kata'], 1000);
  assert.equal(await r.resolve(undefined), 'runc');
  await assert.rejects(r.resolve('runsc'), {
    code: 'EXEC_ERR_INVALID_PARAMS',
    message: /session.runtime runsc is not allowed.*allowed: runc, kata/,
  });
  const before = state.calls;
  await assert.rejects(r.resolve('kata'), {
    code: 'EXEC_ERR_CONFIG',
    message: /kata is allowed here but not registered/,
  });
  assert.equal(state.calls, before + 1, 'the engine was asked again before refusing');
  runtimes['kata'] = { path: '/usr/bin/kata-runtime' };
  assert.equal(await r.resolve('kata'), 'kata');
});

test('check: a default the engine does not have is a config error listing what it has', async () => {
  const { docker } = fakeDocker({ runc: {}, crun: {} });
  await assert.rejects(new RuntimeResolver(docker, 'runsc', [], 1000).check(), {
    code: 'EXEC_ERR_CONFIG',
    message: /runsc \(--runtime\) is not registered.*it has: crun, runc/,
  });
  await new RuntimeResolver(docker, 'crun', [], 1000).check();
});

test('a failed engine answer is not cached: the next call asks again', async () => {
  const { docker, state } = fakeDocker({ runc: {} });
  const r = new RuntimeResolver(docker, undefined, [], 1000);
  state.fail = true;
  await assert.rejects(r.engine(), { code: 'EXEC_ERR_BACKEND_UNAVAILABLE' });
  state.fail = false;
  assert.equal((await r.engine()).engineDefault, 'runc');
  assert.equal(state.calls, 2);
});
