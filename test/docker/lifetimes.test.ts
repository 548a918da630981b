/**
 * Ending every process of a docker session (docs/docker-backend.md, "Ending every process";
 * docs/reliability.md, cases K1 and K2): background processes a finished command left behind
 * (`&`, `nohup`, `setsid`) live with the session and `session/terminateAll` ends them all, on both
 * exec paths, as root and as the sandbox user; a fork bomb stops at the session's process limit
 * and `session/terminateAll` clears it without a restart. Processes are counted inside the
 * container (/proc), outside the session's own tracking.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { startServer, TestSession } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';
import { docker, sleep } from './helpers.ts';

const RUNTIME = process.env.EXEC_SERVER_TEST_RUNTIME;

/**
 * The container's processes outside session 1 (docker-init and the keep-alive loop), the exec
 * agent and this listing's own exec: `pid args` each. Builtins but `tr`.
 */
const LIST = [
  'for d in /proc/[0-9]*; do',
  '  read -r s 2>/dev/null <"$d/stat" || continue',
  '  t=${s##*) }; set -- $t',
  '  [ "$1" = Z ] || [ "$4" = 1 ] || [ "$4" = $$ ] && continue',
  '  printf "%s %s\\n" "${d#/proc/}" "$(tr "\\0" " " <"$d/cmdline" 2>/dev/null)"',
  'done',
].join('\n');

async function processesIn(containerId: string): Promise<string[]> {
  // Tried again while the container has no process slot for the listing (a fork bomb).
  for (let attempt = 1; ; attempt++) {
    try {
      const out = await docker('exec', containerId, '/bin/sh', '-c', LIST);
      return out
        .split('\n')
        .filter((l) => l.trim() !== '' && !l.includes('/.exec-server/exec-agent'))
        .map((l) => l.trim());
    } catch (err) {
      if (attempt >= 50) throw err;
      await sleep(100);
    }
  }
}

async function eventuallyIn(
  containerId: string,
  ok: (p: string[]) => boolean,
  ms = 10_000,
): Promise<{ processes: string[]; ms: number }> {
  const t0 = performance.now();
  for (;;) {
    const processes = await processesIn(containerId);
    if (ok(processes) || performance.now() - t0 > ms) return { processes, ms: performance.now() - t0 };
    await sleep(100);
  }
}

/**
 * How many processes the container has, counted from the host (`docker top`): an exec into a
 * container at its pids limit rarely starts (a fork bomb takes each slot that frees first).
 */
async function processCount(containerId: string): Promise<number> {
  const out = await docker('top', containerId, '-eo', 'pid');
  return out.trim().split('\n').length - 1;
}

const marker = (): string => String(Math.floor(1000 + Math.random() * 8999));

for (const execPath of ['agent', 'exec'] as const) {
  const flags = execPath === 'exec' ? ['--docker-exec-path', 'exec'] : [];
  describe(`ending every process of a docker session [${execPath}${RUNTIME ? `, ${RUNTIME}` : ''}]`, {
    ...dockerTestOptions,
    timeout: dockerTestOptions.skip ? 1000 : 180_000,
  }, () => {
    for (const sandbox of ['danger-full-access', 'workspace-write'] as const) {
      test(`K1 [${sandbox}] background processes live on after their command; terminateAll ends them, the session stays usable`, async (t) => {
        const server = await startServer({ backend: 'docker', flags });
        t.after(() => server.close());
        const s = await TestSession.open(server.url, { session: { sandbox: { type: sandbox } } });
        t.after(() => s.close());
        const info = await s.request<Record<string, unknown>>('session/info', {});
        assert.equal(info['execPath'], execPath);
        const containerId = String(info['containerId']);
        const m = marker();
        // `setsid` leaves the process group and the session; the double fork of `( ... &)` leaves
        // the command's children; `nohup` stays in the group (gVisor's exec path ends that one
        // with the exec: docs/docker-backend.md, "Under gVisor").
        const r = await s.run('leave', [
          'sh',
          '-c',
          `nohup sleep 1${m} >/dev/null 2>&1 & (setsid sleep 2${m} >/dev/null 2>&1 &); (setsid sh -c 'while :; do sleep 3${m}; done' >/dev/null 2>&1 &); sleep 0.2; echo started`,
        ]);
        assert.equal(r.exited['exitCode'], 0);
        await s.start('tracked', ['sleep', `4${m}`]);
        const running = (p: string[]): boolean =>
          [`sleep 2${m}`, `sleep 3${m}`, `sleep 4${m}`].every((c) => p.some((l) => l.endsWith(c)));
        const left = await eventuallyIn(containerId, running);
        assert.ok(
          running(left.processes),
          `the daemons and the tracked command run: ${JSON.stringify(left.processes)}`,
        );

        const t0 = performance.now();
        const ended = await s.request<Record<string, unknown>>('session/terminateAll', {});
        const tookMs = performance.now() - t0;
        assert.equal(ended['terminated'], 1, 'one tracked process was running');
        const after = await processesIn(containerId);
        assert.deepEqual(after, [], 'nothing of the session is left once terminateAll answers');
        assert.equal((await s.result('tracked')).exited['terminal'], 'terminated');
        const again = await s.run('after', ['echo', 'usable']);
        assert.equal(again.stdout, 'usable\n', 'the session stays usable');
        t.diagnostic(`[${execPath}, ${sandbox}] terminateAll answered in ${tookMs.toFixed(0)} ms`);
      });
    }

    // gVisor counts its own threads against the container's pids limit: a fork bomb there ends
    // the sandbox itself (docs/docker-backend.md, "Under gVisor"), so the case is runc's.
    if (RUNTIME !== 'runsc')
      test('K2 a fork bomb stops at the pids limit, another session answers, terminateAll clears it without a restart', async (t) => {
        const server = await startServer({ backend: 'docker', flags });
        t.after(() => server.close());
        const s = await TestSession.open(server.url, {
          session: { sandbox: { type: 'workspace-write' }, resources: { pids: 64 } },
        });
        t.after(() => s.close());
        const other = await TestSession.open(server.url, { session: { sandbox: { type: 'workspace-write' } } });
        t.after(() => other.close());
        const containerId = String((await s.request<Record<string, unknown>>('session/info', {}))['containerId']);
        const startedAt = await docker('inspect', '-f', '{{.State.StartedAt}}', containerId);
        // Two kinds at once: sleeps that hold their slot (no churn) and subshells that exit.
        await s.start('bomb', [
          'sh',
          '-c',
          '(while :; do sleep 60 & done 2>/dev/null) & while :; do (sleep 60 &) 2>/dev/null; done',
        ]);
        let peak = await processCount(containerId);
        for (const t2 = performance.now(); peak < 48 && performance.now() - t2 < 10_000; ) {
          await sleep(100);
          peak = await processCount(containerId);
        }
        assert.ok(peak >= 48 && peak <= 64, `the bomb ran into the limit: ${peak} processes`);
        const t1 = performance.now();
        assert.equal((await other.run('ok', ['echo', 'fine'])).stdout, 'fine\n');
        const otherMs = performance.now() - t1;

        const t0 = performance.now();
        await s.request('session/terminateAll', {});
        const tookMs = performance.now() - t0;
        assert.deepEqual(await processesIn(containerId), [], 'terminateAll cleared the bomb');
        assert.equal((await s.run('after', ['echo', 'recovered'])).stdout, 'recovered\n');
        assert.equal(
          await docker('inspect', '-f', '{{.State.StartedAt}}', containerId),
          startedAt,
          'the container was not restarted',
        );
        t.diagnostic(
          `[${execPath}] peak ${peak} processes; another session's echo ${otherMs.toFixed(0)} ms during the bomb; terminateAll ${tookMs.toFixed(0)} ms`,
        );
      });
  });
}
