/**
 * The exec agent against a real engine: it is the session's path, its faults (killed, its
 * connection broken), the per-command exec fallback (forced, and when the agent cannot run),
 * and a burst to a stop-and-go client through the whole server.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BackendSession } from '../../src/backends/types.ts';
import { dockerTestOptions } from './engine.ts';
import { docker, RecordingSink, sleep, spawnRequest, testSession } from './helpers.ts';
import { startServer, stopAndGoBurst, TestSession } from '../support/harness.ts';

const execPathOf = (s: BackendSession): string | undefined => s.execPath;

async function run(session: BackendSession, argv: string[]): Promise<RecordingSink> {
  const sink = new RecordingSink();
  await session.spawn(spawnRequest(argv), sink);
  await sink.exited;
  return sink;
}

/** Pids of processes named `exec-agent` in the container (daemon and attacher). */
async function agentPids(containerId: string): Promise<string> {
  return (
    await docker(
      'exec',
      containerId,
      'sh',
      '-c',
      'for d in /proc/[0-9]*; do case "$(cat $d/cmdline 2>/dev/null | tr "\\0" " ")" in *exec-agent\\ attach*) echo "${d#/proc/}";; esac; done',
    )
  ).trim();
}

test(
  'commands go through the agent: one attach for many commands, root-only binary, sandbox user with no_new_privs',
  dockerTestOptions,
  async (t) => {
    const session = await testSession(t);
    assert.equal(execPathOf(session), 'agent');
    for (let i = 0; i < 5; i++) assert.equal((await run(session, ['sh', '-c', `echo ${i}`])).text(), `${i}\n`);
    // Daemon + the attacher of the one connection: commands did not each cost an exec.
    assert.equal((await agentPids(session.containerId!)).split('\n').length, 2);
    const sandbox = { kind: 'restricted', writableRoots: ['/workspace'], denyRead: [], network: false } as const;
    const sink = new RecordingSink();
    await session.spawn(
      spawnRequest(['sh', '-c', 'id -u; grep NoNewPrivs /proc/self/status; cat /.exec-server/exec-agent >/dev/null'], {
        sandbox,
      }),
      sink,
    );
    const exit = await sink.exited;
    assert.equal(sink.text('stdout'), '1000\nNoNewPrivs:\t1\n');
    assert.match(sink.text('stderr'), /Permission denied/);
    assert.deepEqual(exit, { kind: 'exited', code: 1 });
  },
);

test(
  'the agent killed mid-command: its commands end lost naming the agent; the next command gets a new agent',
  dockerTestOptions,
  async (t) => {
    const session = await testSession(t);
    const sleeping = new RecordingSink();
    await session.spawn(spawnRequest(['sh', '-c', 'echo started; sleep 300']), sleeping);
    while (!sleeping.text().includes('started')) await sleep(10);
    // A root command of the session kills the daemon (the OOM killer would do the same).
    const killer = new RecordingSink();
    await session.spawn(
      spawnRequest([
        'sh',
        '-c',
        'for d in /proc/[0-9]*; do case "$(tr "\\0" " " <$d/cmdline 2>/dev/null)" in *exec-agent\\ attach*) kill -9 "${d#/proc/}";; esac; done; sleep 5',
      ]),
      killer,
    );
    const exit = await sleeping.exited;
    assert.equal(exit.kind, 'lost');
    assert.match(exit.kind === 'lost' ? exit.reason : '', /exec agent/);
    assert.equal((await killer.exited).kind, 'lost');
    // The command died with its agent (parent-death signal), not left running unreachable.
    const left = await docker('exec', session.containerId!, 'sh', '-c', 'ps -o args | grep -c "[s]leep 300" || true');
    assert.equal(left.trim(), '0');
    assert.equal((await run(session, ['echo', 'again'])).text(), 'again\n');
    assert.equal(execPathOf(session), 'agent');
  },
);

test(
  'a broken agent connection: running commands go on, every byte once and in order, real exit codes',
  dockerTestOptions,
  async (t) => {
    const session = await testSession(t);
    const sink = new RecordingSink();
    await session.spawn(
      spawnRequest(['sh', '-c', 'i=0; while [ $i -lt 400 ]; do echo line-$i; i=$((i+1)); sleep 0.005; done; exit 7']),
      sink,
    );
    await sleep(300);
    // Ending the attacher makes the daemon let the connection go: the server attaches again.
    const pids = (await agentPids(session.containerId!)).split('\n');
    const daemonAndAttacher = await docker(
      'exec',
      session.containerId!,
      'sh',
      '-c',
      `for p in ${pids.join(' ')}; do echo "$p $(cut -d' ' -f4 /proc/$p/stat)"; done`,
    );
    const attacher = daemonAndAttacher
      .trim()
      .split('\n')
      .map((l) => l.split(' '))
      .find(([, ppid]) => ppid === '0')?.[0];
    assert.ok(attacher, `the attacher is the exec's own process: ${daemonAndAttacher}`);
    await docker('exec', session.containerId!, 'kill', attacher);
    assert.deepEqual(await sink.exited, { kind: 'exited', code: 7 });
    const expected = Array.from({ length: 400 }, (_, i) => `line-${i}\n`).join('');
    assert.equal(sink.text('stdout'), expected);
    assert.deepEqual(sink.violations, []);
  },
);

test(
  'fallback: forced per-command execs, and an agent that cannot run there, keep the contract',
  dockerTestOptions,
  async (t) => {
    const a = await testSession(t, { execPath: 'exec' });
    assert.equal(execPathOf(a), 'exec');
    assert.equal((await run(a, ['sh', '-c', 'echo via-exec'])).text(), 'via-exec\n');

    const notBinary = join(tmpdir(), `not-an-agent-${process.pid}`);
    await writeFile(notBinary, 'this is not an executable for this architecture\n');
    const b = await testSession(t, { agentBinary: notBinary });
    assert.equal(execPathOf(b), 'exec');
    assert.match(b.execPathReason ?? '', /exec agent does not start/);
    const sink = await run(b, ['sh', '-c', 'echo still-works; exit 4']);
    assert.equal(sink.text(), 'still-works\n');
    assert.deepEqual(sink.exitResult, { kind: 'exited', code: 4 });
  },
);

test('a 32 MB burst to a stop-and-go client arrives whole through the agent', dockerTestOptions, async (t) => {
  const server = await startServer({ backend: 'docker', flags: ['--ws-buffer-limit-bytes', '1048576'] });
  t.after(() => server.close());
  const s = await TestSession.open(server.url, { session: { sandbox: { type: 'danger-full-access' } } });
  t.after(() => s.close());
  const info = await s.request<Record<string, unknown>>('session/info', {});
  assert.equal(info['execPath'], 'agent', 'session/info says which path the session uses');
  assert.equal(info['execPathReason'], undefined);
  const burst = await stopAndGoBurst(s);
  const r = await s.result('burst', 90_000);
  assert.equal(burst.closed(), false);
  assert.equal(r.stdout.length, 33554432 + 4);
  assert.ok(/^z+end\n$/.test(r.stdout), 'only the bytes the command wrote, in order');
  const seqs = r.events.map((e) => e.params['seq'] as number);
  assert.deepEqual(
    seqs,
    seqs.map((_, i) => i + 1),
    'no gap: nothing was dropped',
  );
});
