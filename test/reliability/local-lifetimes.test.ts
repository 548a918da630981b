/**
 * How long what a local command starts lives (docs/reliability.md, cases L7-L10): never past a
 * SIGKILLed server; background processes as long as their session and no longer (terminateAll,
 * session delete, shutdown); a fork bomb stopped at the session's process limit and cleared.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { startServer, TestSession } from '../support/harness.ts';
import { eventually, processesOf, processesWith, rootSandboxOnly, spawnServer } from './support.ts';

const UNSANDBOXED = { sandbox: { type: 'danger-full-access' } };
const SANDBOXED = { sandbox: { type: 'workspace-write' } };

/** A marker no other process on the host has: `sleep <marker>` is how the test finds its processes. */
function marker(): string {
  return `${7000 + Math.floor(Math.random() * 1000)}.${process.pid}${Math.floor(Math.random() * 1e6)}`;
}

describe('L7 no command outlives a SIGKILLed server', { ...rootSandboxOnly, timeout: 120_000 }, () => {
  test('pipe and PTY, sandboxed and not, foreground, background and setsid daemons', async () => {
    const server = await spawnServer();
    const m = marker();
    const plain = await TestSession.open(server.url, { session: UNSANDBOXED });
    const boxed = await TestSession.open(server.url, { session: SANDBOXED });
    const script = `sleep ${m} & (setsid sleep ${m} &) ; nohup sleep ${m} >/dev/null 2>&1 & exec sleep ${m}`;
    for (const [name, s] of [
      ['plain', plain],
      ['boxed', boxed],
    ] as const) {
      await s.start(`${name}-pipe`, ['sh', '-c', script]);
      await s.start(`${name}-pty`, ['sh', '-c', script], { tty: true });
    }
    const running = await eventually(
      () => processesWith(`sleep ${m}`),
      (p) => p.length >= 16,
      10_000,
    );
    assert.equal(running.length, 16, 'four commands, four sleeps each');
    server.child.kill('SIGKILL');
    await server.exited;
    const left = await eventually(
      () => processesWith(`sleep ${m}`),
      (p) => p.length === 0,
      5_000,
    );
    assert.deepEqual(left, [], 'processes outlived the server');
    await plain.close().catch(() => undefined);
    await boxed.close().catch(() => undefined);
  });
});

for (const [kind, policy] of [
  ['unsandboxed', UNSANDBOXED],
  ['sandboxed', SANDBOXED],
] as const) {
  describe(`L8 background processes live with their session [${kind}]`, {
    ...(kind === 'sandboxed' ? rootSandboxOnly : {}),
    timeout: 120_000,
  }, () => {
    for (const tty of [false, true]) {
      test(`${tty ? 'PTY' : 'pipe'}: kept after the command exits, ended by terminateAll, session delete and shutdown`, async (t) => {
        const server = await startServer();
        t.after(() => server.close());
        const s = await TestSession.open(server.url, { session: policy });
        // `nohup`: on a terminal, a plain `&` job is hung up when the terminal closes, as anywhere
        // (the pause lets nohup and setsid act before the shell's exit hangs the terminal up).
        const leave = async (m: string): Promise<void> => {
          const r = await s.run(
            `bg-${m}`,
            [
              'sh',
              '-c',
              `nohup sleep ${m} >/dev/null 2>&1 & (setsid sleep ${m} >/dev/null 2>&1 &); sleep 0.2; echo started`,
            ],
            { tty },
          );
          assert.equal(r.exited['exitCode'], 0);
          // Polled, not a fixed pause: on a loaded machine the two may take a moment to exec.
          assert.equal(
            (
              await eventually(
                () => processesWith(`sleep ${m}`),
                (p) => p.length === 2,
              )
            ).length,
            2,
            'both background processes still run after the command exited',
          );
        };
        const m1 = marker();
        await leave(m1);
        assert.equal((await s.request<Record<string, unknown>>('session/terminateAll', {}))['terminated'], 0);
        assert.deepEqual(
          await eventually(
            () => processesWith(`sleep ${m1}`),
            (p) => p.length === 0,
          ),
          [],
          'terminateAll ended them',
        );
        assert.equal(
          (await s.run('after', ['echo', 'usable'], { tty })).exited['exitCode'],
          0,
          'the session stays usable',
        );

        const m2 = marker();
        await leave(m2);
        const del = await server.app.inject({ method: 'DELETE', url: `/v1/sessions/${s.sessionId}` });
        assert.equal(del.statusCode, 204);
        assert.deepEqual(
          await eventually(
            () => processesWith(`sleep ${m2}`),
            (p) => p.length === 0,
          ),
          [],
          'session delete ended them',
        );
        await s.close();

        const s2 = await TestSession.open(server.url, { session: policy });
        const m3 = marker();
        await s2.run('bg', ['sh', '-c', `nohup sleep ${m3} >/dev/null 2>&1 & sleep 0.2; echo started`], { tty });
        assert.equal(processesWith(`sleep ${m3}`).length, 1);
        await s2.close();
        await server.close();
        assert.deepEqual(
          await eventually(
            () => processesWith(`sleep ${m3}`),
            (p) => p.length === 0,
          ),
          [],
          'shutdown ended them',
        );
      });
    }
  });
}

describe('L9 a fork bomb in a sandboxed session', { ...rootSandboxOnly, timeout: 120_000 }, () => {
  test('stops at the session process limit, leaves other sessions working, and is cleared by terminateAll', async (t) => {
    const server = await startServer();
    t.after(() => server.close());
    const s = await TestSession.open(server.url, { session: { ...SANDBOXED, resources: { pids: 64 } } });
    t.after(() => s.close());
    const other = await TestSession.open(server.url, { session: SANDBOXED });
    t.after(() => other.close());
    const uid = Number((await s.run('id', ['id', '-u'])).stdout);
    // Forks for as long as it can; what it forked holds its slot for 60 s.
    await s.start('bomb', ['sh', '-c', 'while :; do (sleep 60 &) 2>/dev/null; done']);
    const peak = (
      await eventually(
        () => processesOf(uid),
        (p) => p.length >= 48,
        10_000,
      )
    ).length;
    assert.ok(peak > 8 && peak <= 64, `the bomb ran into the limit: ${peak} processes`);
    const t0 = performance.now();
    assert.equal((await other.run('ok', ['echo', 'fine'])).stdout, 'fine\n');
    const otherMs = performance.now() - t0;
    await s.request('session/terminateAll', {});
    assert.deepEqual(
      await eventually(
        () => processesOf(uid),
        (p) => p.length === 0,
      ),
      [],
      'terminateAll cleared the bomb',
    );
    assert.equal((await s.run('after', ['echo', 'recovered'])).stdout, 'recovered\n');
    t.diagnostic(`peak ${peak} processes; another session's echo took ${otherMs.toFixed(0)} ms during the bomb`);
  });
});
