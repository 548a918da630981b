/**
 * Co-location of a terminal stream by the exec agent (`--pty-pin`, native/pty-pin.h) against a
 * real engine: off by default; turned on, a PTY command streaming fast is gathered on one CPU
 * with the agent and gets its CPUs back once quiet, and a command started meanwhile is not
 * confined with it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { BackendSession } from '../../src/backends/types.ts';
import { dockerTestOptions } from './engine.ts';
import { RecordingSink, spawnRequest, testSession } from './helpers.ts';
import { until } from '../support/until.ts';

const CPUS = /Cpus_allowed_list:\s*(\S+)/g;

async function run(session: BackendSession, script: string, mode: 'pty' | 'pipe-no-stdin'): Promise<string> {
  const sink = new RecordingSink();
  await session.spawn(spawnRequest(['sh', '-c', script], { mode }), sink);
  assert.deepEqual(await sink.exited, { kind: 'exited', code: 0 });
  // Zeros from the stream, then the lists: only the text after the zeros matters.
  return sink.text().replaceAll('\0', '');
}

/** The CPU list a command of the session starts with. */
async function sessionCpus(session: BackendSession): Promise<string> {
  const text = await run(session, 'grep Cpus_allowed_list /proc/self/status', 'pipe-no-stdin');
  return [...text.matchAll(CPUS)][0]?.[1] ?? '?';
}

/** 24 MiB to the terminal, then the shell's CPU list at once and after 0.5 s of quiet. */
async function duringAndAfter(session: BackendSession): Promise<[string | undefined, string | undefined]> {
  const script =
    'dd if=/dev/zero bs=65536 count=384 2>/dev/null; grep Cpus_allowed_list /proc/self/status; sleep 0.5; grep Cpus_allowed_list /proc/self/status';
  const lists = [...(await run(session, script, 'pty')).matchAll(CPUS)].map((m) => m[1]);
  return [lists[0], lists[1]];
}

test('by default a PTY command streaming fast keeps its CPUs', dockerTestOptions, async (t) => {
  const session = await testSession(t);
  const own = await sessionCpus(session);
  for (let i = 0; i < 2; i++) assert.deepEqual(await duringAndAfter(session), [own, own]);
});

test(
  'with pinning on, a PTY stream is gathered on one CPU, gets its CPUs back once quiet, and other commands are not confined',
  dockerTestOptions,
  async (t) => {
    const session = await testSession(t, { ptyPinning: true });
    const own = await sessionCpus(session);
    if (/^\d+$/.test(own)) {
      // One CPU: nothing to gather on, and nothing changes.
      assert.deepEqual(await duringAndAfter(session), [own, own]);
      return;
    }
    let pinnedSeen = false;
    for (let attempt = 0; attempt < 3 && !pinnedSeen; attempt++) {
      const [during, after] = await duringAndAfter(session);
      assert.equal(after, own, 'once quiet, the command has the CPUs it started with');
      assert.ok(during === own || /^\d+$/.test(during ?? ''), `one CPU or all of them: ${during}`);
      pinnedSeen = during !== own;
    }
    assert.ok(pinnedSeen, 'a 24 MiB terminal stream was gathered on one CPU in one of three attempts');

    // A long stream holds the agent on one CPU; a command started meanwhile gets the full set.
    const stream = new RecordingSink();
    stream.keep = false;
    await session.spawn(
      spawnRequest(['sh', '-c', 'dd if=/dev/zero bs=65536 count=4000 2>/dev/null'], { mode: 'pty' }),
      stream,
    );
    await until('the stream is under way', () => stream.bytes > 16 * 1024 * 1024, 30_000);
    const probe =
      'for d in /proc/[0-9]*; do case "$(tr "\\0" " " < $d/cmdline 2>/dev/null)" in *exec-agent*) grep Cpus_allowed_list $d/status;; esac; done; echo self; grep Cpus_allowed_list /proc/self/status';
    // Probed until one probe ran while the agent was pinned (a busy machine may pause the stream).
    let probedWhilePinned = false;
    for (let i = 0; i < 10 && !probedWhilePinned && stream.exitResult === undefined; i++) {
      const text = await run(session, probe, 'pipe-no-stdin');
      const [agents = '', self = ''] = text.split('self\n');
      assert.equal([...self.matchAll(CPUS)][0]?.[1], own, 'a command started during the pin has every CPU');
      const agentLists = [...agents.matchAll(CPUS)].map((m) => m[1]);
      assert.ok(agentLists.length > 0, `the agent's CPU lists were read: ${text}`);
      probedWhilePinned = agentLists.some((l) => /^\d+$/.test(l ?? ''));
    }
    assert.ok(probedWhilePinned, 'a command was started while the agent was pinned');
    assert.deepEqual(await stream.exited, { kind: 'exited', code: 0 });
    assert.equal(stream.bytes, 4000 * 65536, 'every byte of the stream arrived');
  },
);
