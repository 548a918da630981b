/**
 * The per-session disk limit (docs/reliability.md, case A5) on both backends: a session with a
 * small `resources.diskMb` writes past it; where the engine does not enforce the limit (the local
 * backend, docker on overlay2 over ext4) the disk watch ends its processes within a few
 * seconds and refuses new ones with EXEC_ERR_DISK_LIMIT until the file is removed. Where the
 * engine enforces it (overlay2 on xfs with project quotas) the write itself fails.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { RpcError } from '../../src/client/rpc-connection.ts';
import { BACKENDS } from '../support/backends.ts';
import { startServer, TestSession } from '../support/harness.ts';

const MIB = 1024 * 1024;

/** 64 MiB into the workspace, then a sleep the watch has to end. `dd` with plain numbers: busybox too. */
const FILL = 'dd if=/dev/zero of=big bs=1048576 count=64 2>&1; sync; sleep 60';

for (const backend of BACKENDS) {
  describe(`disk limit [${backend}]`, { timeout: 120_000 }, () => {
    test('A5 a session past its diskMb has its processes ended and new ones refused until files are removed', async (t) => {
      const server = await startServer({ backend, flags: ['--disk-watch-seconds', '1'] });
      t.after(() => server.close());
      const s = await TestSession.open(server.url, {
        session: { sandbox: { type: 'workspace-write' }, resources: { diskMb: 32 } },
      });
      t.after(() => s.close());
      const info = await s.request<Record<string, unknown>>('session/info', {});
      const workdir = String(info['workdir']);
      assert.equal(info['diskLimitBytes'], 32 * MIB);
      const enforcement = info['diskEnforcement'];
      t.diagnostic(`disk limit enforced by: ${String(enforcement)}`);
      assert.ok(enforcement === 'engine' || enforcement === 'watch', `diskEnforcement ${String(enforcement)}`);
      const http = (await fetch(`${server.httpUrl}/v1/sessions/${s.sessionId}`).then((r) => r.json())) as Record<
        string,
        unknown
      >;
      assert.equal(http['diskLimitBytes'], 32 * MIB, 'the HTTP session object carries the limit');
      assert.equal(http['diskEnforcement'], enforcement);

      if (enforcement === 'engine') {
        // The engine refuses the writes past the limit: dd fails, nothing to stop.
        const r = await s.run('fill', ['sh', '-c', 'dd if=/dev/zero of=big bs=1048576 count=64']);
        assert.notEqual(r.exited['exitCode'], 0, 'the write past the limit fails');
        return;
      }

      const startedAt = Date.now();
      await s.start('fill', ['sh', '-c', FILL]);
      // The watch measures every second; the process then gets its terminate grace (500 ms here).
      const ended = await s.result('fill', 15_000);
      const tookMs = Date.now() - startedAt;
      assert.notEqual(
        ended.exited['exitCode'],
        0,
        `the filling process was ended, not left to its sleep: ${JSON.stringify(ended.exited)}`,
      );
      assert.ok(tookMs < 15_000, `ended after ${tookMs} ms`);
      t.diagnostic(`[${backend}] the writer ended ${tookMs} ms after its start`);

      const refused = await s.start('next', ['true']).then(
        () => undefined,
        (err: unknown) => err,
      );
      assert.ok(refused instanceof RpcError, `process/start is refused: ${String(refused)}`);
      assert.equal(refused.code, 'EXEC_ERR_DISK_LIMIT');
      assert.match(refused.message, /past its limit of 32\.0 MiB/);
      assert.match(refused.message, /fs\/remove/);
      assert.match(refused.message, /larger resources\.diskMb/);
      assert.equal(refused.data?.['limitBytes'], 32 * MIB);
      assert.ok(Number(refused.data?.['usedBytes']) > 32 * MIB, `usedBytes ${String(refused.data?.['usedBytes'])}`);

      const over = await s.request<Record<string, unknown>>('session/info', {});
      assert.equal(over['diskExceeded'], true);
      assert.ok(Number(over['diskUsedBytes']) >= 64 * MIB, `diskUsedBytes ${String(over['diskUsedBytes'])}`);
      assert.equal(typeof over['diskMeasuredAt'], 'string');
      const metrics = await fetch(`${server.httpUrl}/metrics`).then((r) => r.text());
      assert.match(metrics, new RegExp(`exec_server_disk_limit_exceeded_total\\{backend="${backend}"\\} 1`));

      // The way out: remove the file; the next start measures again and runs.
      await s.request('fs/remove', { path: `${workdir}/big` });
      const after = await s.run('after', ['sh', '-c', 'echo ok']);
      assert.equal(after.exited['exitCode'], 0);
      assert.equal(after.stdout.trim(), 'ok');
      const back = await s.request<Record<string, unknown>>('session/info', {});
      assert.equal(back['diskExceeded'], false, 'the measurement at the start found the session back under its limit');
    });

    test('a session under its limit is measured and left alone', async (t) => {
      const server = await startServer({ backend, flags: ['--disk-watch-seconds', '1'] });
      t.after(() => server.close());
      const s = await TestSession.open(server.url, { session: { sandbox: { type: 'workspace-write' } } });
      t.after(() => s.close());
      await s.start('small', [
        'sh',
        '-c',
        'dd if=/dev/zero of=small bs=1048576 count=2 2>/dev/null; sleep 3; echo done',
      ]);
      const r = await s.result('small', 20_000);
      assert.equal(r.exited['exitCode'], 0);
      assert.equal(r.stdout.trim(), 'done');
      const info = await s.request<Record<string, unknown>>('session/info', {});
      assert.equal(info['diskLimitBytes'], 10_240 * MIB, 'the default --disk-mb');
      if (info['diskEnforcement'] === 'watch') {
        assert.equal(info['diskExceeded'], false);
        assert.ok(Number(info['diskUsedBytes']) >= 2 * MIB, `diskUsedBytes ${String(info['diskUsedBytes'])}`);
      }
    });
  });
}
