/**
 * The per-session disk limit (docs/reliability.md, case A5) on both backends: a session with a
 * small `resources.diskMb` writes past it; where the engine does not enforce the limit (the local
 * backend, docker on overlay2 over ext4) the disk watch ends its processes within a few
 * seconds and refuses new ones with EXEC_ERR_DISK_LIMIT until the file is removed. Where the
 * engine enforces it (overlay2 on xfs with project quotas) the write itself fails.
 */
import assert from 'node:assert/strict';
import { describe, type TestContext, test } from 'node:test';
import { RpcError } from '../../src/client/rpc-connection.ts';
import { BACKENDS } from '../support/backends.ts';
import { type BackendKind, startServer, type TestServer, TestSession } from '../support/harness.ts';

const MIB = 1024 * 1024;

/** 64 MiB into the workspace, then a sleep the watch has to end. `dd` with plain numbers: busybox too. */
const FILL = 'dd if=/dev/zero of=big bs=1048576 count=64 2>&1; sync; sleep 60';

/** A server whose disk watch measures every second, and a sandboxed session with `diskMb` 32. */
async function limitedSession(
  t: TestContext,
  backend: BackendKind,
): Promise<{ server: TestServer; s: TestSession; info: Record<string, unknown> }> {
  const server = await startServer({ backend, flags: ['--disk-watch-seconds', '1'] });
  t.after(() => server.close());
  const s = await TestSession.open(server.url, {
    session: { sandbox: { type: 'workspace-write' }, resources: { diskMb: 32 } },
  });
  t.after(() => s.close());
  return { server, s, info: await s.request<Record<string, unknown>>('session/info', {}) };
}

for (const backend of BACKENDS) {
  describe(`disk limit [${backend}]`, { timeout: 120_000 }, () => {
    test('A5 a session past its diskMb has its processes ended and new ones refused until files are removed', async (t) => {
      const { server, s, info } = await limitedSession(t, backend);
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
      // Past the limit, not necessarily all 64 MiB: the watch may end the writer mid-write.
      assert.ok(Number(over['diskUsedBytes']) > 32 * MIB, `diskUsedBytes ${String(over['diskUsedBytes'])}`);
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

    test('A5 a background writer a finished command left (its own session, setsid) is ended too', async (t) => {
      const { s, info } = await limitedSession(t, backend);
      if (info['diskEnforcement'] === 'engine') {
        // Then no write gets past the limit (previous test), and there is no watch to test.
        t.skip('the engine enforces the limit: no disk watch here');
        return;
      }
      const workdir = String(info['workdir']);
      // Eight files of 8 MiB written round and round (at most 64 MiB): past the limit after the
      // fourth, and writing for as long as it runs; `beat` counts the rounds.
      const writer =
        'i=0; while :; do dd if=/dev/zero of=part.$((i % 8)) bs=1048576 count=8 2>/dev/null; i=$((i + 1)); echo $i >>beat; sleep 0.1; done';
      const left = await s.run('leave', ['sh', '-c', `(setsid sh -c '${writer}' >/dev/null 2>&1 &); echo started`]);
      assert.equal(left.exited['exitCode'], 0, 'the command itself is over at once');
      const startedAt = Date.now();
      const beats = async (): Promise<number> =>
        Buffer.from(
          (await s.request<{ dataBase64: string }>('fs/readFile', { path: `${workdir}/beat` })).dataBase64,
          'base64',
        )
          .toString('utf8')
          .split('\n')
          .filter((l) => l !== '').length;
      let exceeded = false;
      while (!exceeded && Date.now() - startedAt < 20_000) {
        await new Promise((r) => setTimeout(r, 250));
        exceeded = (await s.request<Record<string, unknown>>('session/info', {}))['diskExceeded'] === true;
      }
      assert.ok(exceeded, 'the watch found the session past its limit');
      // Ended in the round that found it past the limit: the rounds stop.
      let last = await beats();
      let stoppedAt: number | undefined;
      while (Date.now() - startedAt < 30_000) {
        await new Promise((r) => setTimeout(r, 1500));
        const now = await beats();
        if (now === last) {
          stoppedAt = Date.now();
          break;
        }
        last = now;
      }
      assert.ok(stoppedAt !== undefined, `the background writer was ended (still at round ${last})`);
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(await beats(), last, 'and stays ended');
      t.diagnostic(
        `[${backend}] the background writer stopped after ${last} rounds, ${stoppedAt - startedAt} ms after it began`,
      );
      for (let i = 0; i < 8; i++) await s.request('fs/remove', { path: `${workdir}/part.${i}`, force: true });
      assert.equal(
        (await s.run('after', ['sh', '-c', 'echo ok'])).stdout.trim(),
        'ok',
        'usable once the files are gone',
      );
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
