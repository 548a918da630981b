/**
 * The disk watch's own rules, on a stub session (the real backends are in
 * test/reliability/disk.test.ts): slots bound measurements across sessions, a failed
 * measurement changes nothing, and a start past the limit re-measures before it is refused.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ExecServerError } from '../../src/errors.ts';
import { silentLogger } from '../../src/logger.ts';
import { Metrics } from '../../src/metrics.ts';
import { DiskWatch, MeasureSlots } from '../../src/sessions/disk-watch.ts';

const MIB = 1024 * 1024;

test('MeasureSlots: at most N at once; a round without a free slot skips, a start waits for one', async () => {
  const slots = new MeasureSlots(2);
  let running = 0;
  let peak = 0;
  const release: Array<() => void> = [];
  const job = (): Promise<number> =>
    new Promise<number>((resolve) => {
      running++;
      peak = Math.max(peak, running);
      release.push(() => {
        running--;
        resolve(1);
      });
    });
  const a = slots.run(job, false);
  const b = slots.run(job, false);
  assert.equal(await slots.run(job, false), undefined, 'skipped: both slots busy');
  const c = slots.run(job, true);
  await new Promise((r) => setImmediate(r));
  assert.equal(running, 2, 'the waiting one has not started');
  release.shift()?.();
  assert.equal(await a, 1);
  await new Promise((r) => setImmediate(r));
  assert.equal(running, 2, 'the waiter took the freed slot');
  for (const r of release.splice(0)) r();
  await new Promise((r) => setImmediate(r));
  for (const r of release.splice(0)) r();
  assert.deepEqual(await Promise.all([b, c]), [1, 1]);
  assert.equal(peak, 2);
});

test('DiskWatch: past the limit ends the processes and refuses starts; a failed measurement keeps the last; removal lets starts through', async () => {
  let used = 10 * MIB;
  let failing = false;
  let terminated = 0;
  const session = {
    backend: {
      disk: {
        enforcement: 'watch' as const,
        usage: async () => (failing ? Promise.reject(new Error('engine gone')) : used),
      },
    },
    status: { status: 'alive' as const },
    spec: { resources: { diskMb: 32 } },
    processes: {},
    terminateAll: async () => {
      terminated++;
      return 0;
    },
  };
  const metrics = new Metrics();
  const watch = new DiskWatch(session as never, {
    intervalMs: 20,
    slots: new MeasureSlots(1),
    log: silentLogger,
    metrics,
    backendKind: 'local',
  });
  assert.deepEqual(watch.info(), { diskLimitBytes: 32 * MIB, diskEnforcement: 'watch' }, 'no measurement yet');
  await watch.admit();
  watch.start();
  const until = async (ok: () => boolean): Promise<void> => {
    const deadline = Date.now() + 2000;
    while (!ok() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    assert.ok(ok());
  };
  await until(() => watch.info().diskUsedBytes === 10 * MIB);
  assert.equal(watch.info().diskExceeded, false);
  used = 40 * MIB;
  await until(() => terminated > 0);
  assert.equal(watch.info().diskExceeded, true);
  await assert.rejects(
    watch.admit(),
    (err: unknown) =>
      err instanceof ExecServerError &&
      err.code === 'EXEC_ERR_DISK_LIMIT' &&
      err.statusCode === 507 &&
      /40\.0 MiB is past its limit of 32\.0 MiB/.test(err.message),
  );
  failing = true;
  await assert.rejects(watch.admit(), /past its limit/, 'a failed re-measure keeps the last measurement');
  failing = false;
  used = 1 * MIB;
  await watch.admit();
  assert.equal(watch.info().diskExceeded, false);
  watch.stop();
  assert.match(await metrics.registry.metrics(), /exec_server_disk_limit_exceeded_total\{backend="local"\} 1/);
});
