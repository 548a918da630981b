/**
 * Races of hibernation, wake and forks with memory under gVisor, against a real server: calls
 * that overlap a checkpoint or a restore must wait for it, never run a second checkpoint of the
 * same container beside it, and leave the session answering with its state consistent.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { dockerTestOptions } from '../docker/engine.ts';
import { docker, sleep } from '../docker/helpers.ts';
import { gvisorSession, http } from '../support/gvisor.ts';
import type { TestServer } from '../support/harness.ts';

async function checkpointing(t: TestContext) {
  const dir = await mkdtemp(join(tmpdir(), 'exec-server-hib-races-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return gvisorSession(t, ['--allowed-runtimes', 'runsc', '--checkpoint-dir', dir, '--checkpoint-max-mb', '512']);
}

/** A checkpointing server's session, with its id and its container's. */
async function checkpointingSession(t: TestContext) {
  const { server, s } = await checkpointing(t);
  const containerId = String((await s.request('session/info', {}))['containerId']);
  return { server, s, id: s.sessionId, containerId };
}

/** Polls the session's hibernation state until `want` (for at most 30 s). */
async function until(server: TestServer, id: string, want: string): Promise<void> {
  const end = Date.now() + 30_000;
  for (;;) {
    const got = (await http(server, 'GET', `/v1/sessions/${id}`)).body['hibernation'];
    if (got === want) return;
    assert.ok(Date.now() < end, `state ${want} not seen (last ${String(got)})`);
    await sleep(10);
  }
}

/** Deletes what a fork answered (its sessions, then its snapshot); before the server closes. */
async function removeFork(server: TestServer, body: Record<string, unknown>): Promise<void> {
  const sessions = (body['sessions'] as Array<Record<string, unknown>> | undefined) ?? [];
  for (const x of sessions) {
    const del = await http(server, 'DELETE', `/v1/sessions/${String(x['sessionId'])}`);
    assert.equal(del.status, 204, `fork delete: ${JSON.stringify(del.body)}`);
  }
  const snap = body['snapshot'] as Record<string, unknown> | undefined;
  if (snap === undefined) return;
  const del = await http(server, 'DELETE', `/v1/snapshots/${String(snap['snapshotId'])}`);
  assert.equal(del.status, 204, `snapshot delete: ${JSON.stringify(del.body)}`);
}

test(
  'a memory fork waiting on a hibernation and a hibernate sent during the fork-driven wake: one checkpoint at a time',
  dockerTestOptions,
  async (t) => {
    const { server, s, id, containerId } = await checkpointingSession(t);
    // An open read stream keeps H1 draining (calls inside finish first) while the fork comes:
    // the fork's wake waits on H1, then wakes the session (T2) once the stream is closed.
    await s.run('big', ['sh', '-c', 'head -c 20000000 /dev/zero > /tmp/big']);
    await s.request('fs/open', { handleId: 'h', path: '/tmp/big' });
    await s.request('fs/readBlock', { handleId: 'h', offset: 0, len: 1024 });
    const h1 = http(server, 'POST', `/v1/sessions/${id}/hibernate`);
    await until(server, id, 'hibernating');
    const fork = http(server, 'POST', `/v1/sessions/${id}/fork`, { count: 1, memory: true });
    await sleep(3000);
    await s.request('fs/close', { handleId: 'h' });
    const a1 = await h1;
    await until(server, id, 'waking');
    // H2 during the wake the fork started: it must wait for the fork's checkpoint (or go
    // first), never checkpoint beside it.
    const h2 = http(server, 'POST', `/v1/sessions/${id}/hibernate`);
    const [f, a2] = await Promise.all([fork, h2]);
    try {
      assert.equal(a1.status, 200, JSON.stringify(a1.body));
      assert.equal(f.status, 201, `fork: ${JSON.stringify(f.body)}`);
      assert.equal(a2.status, 200, `second hibernate: ${JSON.stringify(a2.body)}`);
      assert.equal(a2.body['hibernation'], 'hibernated');
      // Either went first (the fork's restore leaves it awake); the state matches the container.
      const info = (await http(server, 'GET', `/v1/sessions/${id}`)).body;
      assert.equal(info['status'], 'alive', JSON.stringify(info));
      const status = (await docker('inspect', '-f', '{{.State.Status}}', containerId)).trim();
      const want = info['hibernation'] === 'hibernated' ? 'exited' : 'running';
      assert.equal(status, want, `session ${String(info['hibernation'])}, container ${status}`);
      // And it answers (waking when hibernated).
      const r = await s.run('after', ['sh', '-c', 'echo alive']);
      assert.equal(r.stdout, 'alive\n', JSON.stringify(r));
    } finally {
      await removeFork(server, f.body);
    }
  },
);

/** The engine's label of this server's containers (read while the source exists). */
async function instanceOf(containerId: string): Promise<string> {
  return (await docker('inspect', '-f', '{{index .Config.Labels "exec-server.instance"}}', containerId)).trim();
}

/** This server's containers, and the snapshot images of `sessionId`. */
async function leftovers(instance: string, sessionId: string): Promise<{ containers: string[]; images: string[] }> {
  const list = async (...args: string[]): Promise<string[]> =>
    (await docker(...args)).split('\n').filter((l) => l.trim() !== '');
  return {
    containers: await list('ps', '-aq', '--filter', `label=exec-server.instance=${instance}`),
    images: await list('images', '-q', '--filter', `label=exec-server.snapshot-session=${sessionId}`),
  };
}

for (const when of ['checkpointing', 'checking'] as const) {
  test(
    `the source deleted while its memory fork of 2 is ${when}: clear answers, nothing left behind`,
    dockerTestOptions,
    async (t) => {
      const { server, id, containerId } = await checkpointingSession(t);
      const instance = await instanceOf(containerId);
      const fork = http(server, 'POST', `/v1/sessions/${id}/fork`, { count: 2, memory: true });
      // Checking: before the fork stops the source (its stats and quota); else during the checkpoint.
      if (when === 'checkpointing') await until(server, id, 'hibernating');
      else await sleep(100);
      const del = await http(server, 'DELETE', `/v1/sessions/${id}`);
      const f = await fork;
      try {
        assert.equal(del.status, 204, JSON.stringify(del.body));
        assert.ok(
          f.status === 201 || (f.status >= 400 && f.status !== 500 && typeof f.body['code'] === 'string'),
          JSON.stringify(f),
        );
      } finally {
        await removeFork(server, f.body);
      }
      const left = await leftovers(instance, id);
      assert.deepEqual(left, { containers: [], images: [] }, `fork answered ${f.status}`);
    },
  );
}

test(
  'deleted while hibernating with a command waiting to start: clear answers, no container left',
  dockerTestOptions,
  async (t) => {
    const { server, s, id, containerId } = await checkpointingSession(t);
    const instance = await instanceOf(containerId);
    const h = http(server, 'POST', `/v1/sessions/${id}/hibernate`);
    await until(server, id, 'hibernating');
    // A command waits at the gate; then the session is deleted, still hibernating.
    const started = s.request('process/start', { processId: 'late', argv: ['sh', '-c', 'echo late'] }).then(
      (v) => ({ ok: true as const, v }),
      (err: unknown) => ({ ok: false as const, err }),
    );
    await sleep(50);
    const del = await http(server, 'DELETE', `/v1/sessions/${id}`);
    assert.equal(del.status, 204, JSON.stringify(del.body));
    const [hib, st] = await Promise.all([h, started]);
    assert.ok(hib.status === 200 || typeof hib.body['code'] === 'string', JSON.stringify(hib));
    if (!st.ok) assert.match(String((st.err as Error).message), /./);
    await sleep(2000);
    const left = await leftovers(instance, id);
    assert.deepEqual(left.containers, [], `hibernate ${hib.status}, start ${JSON.stringify(st)}`);
  },
);

test(
  'wake sent while a hibernation is failing (a read stream held past the drain): wake answers awake',
  dockerTestOptions,
  async (t) => {
    const { server, s } = await checkpointing(t);
    const id = s.sessionId;
    await s.run('big', ['sh', '-c', 'head -c 20000000 /dev/zero > /tmp/big']);
    await s.request('fs/open', { handleId: 'h', path: '/tmp/big' });
    await s.request('fs/readBlock', { handleId: 'h', offset: 0, len: 1024 });
    const h = http(server, 'POST', `/v1/sessions/${id}/hibernate`);
    await until(server, id, 'hibernating');
    const w = await http(server, 'POST', `/v1/sessions/${id}/wake`);
    const hib = await h;
    await s.request('fs/close', { handleId: 'h' });
    // The hibernation could not drain (the documented 30 s): its own answer says so.
    assert.equal(hib.body['code'], 'EXEC_ERR_BUSY', JSON.stringify(hib.body));
    // The wake asked for an awake session, which it is: not the hibernation's error.
    assert.equal(w.status, 200, `wake: ${JSON.stringify(w.body)}`);
    assert.equal(w.body['hibernation'], 'awake');
    assert.equal((await s.run('after', ['sh', '-c', 'echo alive'])).stdout, 'alive\n');
  },
);
