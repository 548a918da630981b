/**
 * Forks with memory against a real engine (runsc registered, experimental mode): a source
 * session with a counter loop and a PTY shell holding a variable is forked 3 ways; in each
 * fork the counter goes on from the fork point, the shell still has its variable and answers
 * through stdin, writes stay in their own session, and the source never stopped for long. A
 * live template starts a session with its server answering; runc and too-large sessions are
 * refused; deleting the template removes its checkpoint.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { dockerTestOptions } from '../docker/engine.ts';
import { sleep } from '../docker/helpers.ts';
import type { DockerBackend } from '../../src/backends/docker/docker-backend.ts';
import { GVISOR, gvisorSession, http, readCounter } from '../support/gvisor.ts';
import { TestSession } from '../support/harness.ts';

const COUNTER =
  "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done' </dev/null >/dev/null 2>&1 &";
const b64 = (s: string): string => Buffer.from(s).toString('base64');
/** The counter loop's value now (COUNTER writes it). */
const counter = (s: TestSession, id: string): Promise<number> => readCounter(s, id, '/tmp/count');

/**
 * A gVisor session on a server that keeps memory checkpoints (at most `maxMb` each) in a
 * directory of its own, removed when the test ends.
 */
async function checkpointing(t: TestContext, maxMb: number, flags: readonly string[]) {
  const dir = await mkdtemp(join(tmpdir(), 'exec-server-checkpoints-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const { server, s } = await gvisorSession(t, [
    ...flags,
    '--checkpoint-dir',
    dir,
    '--checkpoint-max-mb',
    String(maxMb),
  ]);
  return { dir, server, s };
}

interface Chunk {
  readonly seq: number;
  readonly text: string;
  /** When the client got it. */
  readonly at: number;
}

/** The output of `processId` after `afterSeq`, read until `pattern` shows (process/read, long poll). */
async function readUntil(
  s: TestSession,
  processId: string,
  pattern: RegExp,
  afterSeq = 0,
): Promise<{ text: string; seqs: number[]; chunks: Chunk[] }> {
  let text = '';
  const seqs: number[] = [];
  const chunks: Chunk[] = [];
  let next = afterSeq;
  const deadline = Date.now() + 20_000;
  while (!pattern.test(text)) {
    assert.ok(Date.now() < deadline, `${processId}: ${pattern} not seen in ${JSON.stringify(text)}`);
    const r = await s.request<{ chunks: Array<{ seq: number; chunk: string }> }>('process/read', {
      processId,
      afterSeq: next,
      waitMs: 2000,
    });
    for (const c of r.chunks) {
      const piece = Buffer.from(c.chunk, 'base64').toString('utf8');
      text += piece;
      seqs.push(c.seq);
      chunks.push({ seq: c.seq, text: piece, at: Date.now() });
      next = Math.max(next, c.seq);
    }
  }
  return { text, seqs, chunks };
}

/**
 * Numbered lines in bursts of 20 writes every 20 ms, on a pipe: output flowing while the fork is
 * made, several writes of it merged into one chunk by the server.
 */
const LINES = 'i=0; while :; do j=0; while [ $j -lt 20 ]; do i=$((i+1)); j=$((j+1)); echo L$i; done; sleep 0.02; done';

/** Asserts the line numbers of `text` go up by one each (nothing twice, nothing skipped). */
function assertConsecutive(text: string, what: string): void {
  const numbers = text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => Number(/^L(\d+)$/.exec(l)?.[1]));
  for (let i = 1; i < numbers.length; i++)
    assert.equal(numbers[i], Number(numbers[i - 1]) + 1, `${what}: line ${numbers[i]} after ${numbers[i - 1]}`);
}

test(
  'a session forked 3 ways with its memory: processes go on in each, writes stay apart',
  dockerTestOptions,
  async (t) => {
    const { dir, server, s } = await checkpointing(t, 512, ['--allowed-runtimes', 'runsc']);
    assert.equal((await s.run('loop', ['sh', '-c', COUNTER])).exited['exitCode'], 0);
    await s.start('shell', ['sh'], { tty: true });
    await readUntil(s, 'shell', /# /);
    await s.request('process/write', { processId: 'shell', chunk: b64('x=forty-two; echo ready-$x\n') });
    const before = await readUntil(s, 'shell', /ready-forty-two/);
    // A client reads `lines` in the source all through the fork (long polls).
    await s.start('lines', ['sh', '-c', LINES]);
    let reading = true;
    const reader = (async () => {
      const got: Chunk[] = [];
      while (reading) got.push(...(await readUntil(s, 'lines', /L/, got.at(-1)?.seq ?? 0)).chunks);
      return got;
    })();
    await sleep(300);
    const atFork = await counter(s, 'c0');

    const forked = await http(server, 'POST', `/v1/sessions/${s.sessionId}/fork`, { count: 3, memory: true });
    reading = false;
    assert.equal(forked.status, 201, JSON.stringify(forked.body));
    const snapshot = forked.body['snapshot'] as Record<string, unknown>;
    const sessions = forked.body['sessions'] as Array<Record<string, unknown>>;
    assert.equal(sessions.length, 3);
    assert.equal(snapshot['memory'], true);
    const pauseMs = Number(snapshot['pauseMs']);
    assert.ok(pauseMs > 0 && pauseMs < 30_000, `the source paused ${pauseMs} ms`);
    assert.equal(new Set(sessions.map((f) => f['containerId'])).size, 3, 'a container each');

    const metrics = async (): Promise<string> => (await fetch(`${server.httpUrl}/metrics`)).text();
    assert.match(await metrics(), /exec_server_memory_checkpoints 1\n/);
    assert.match(await metrics(), /exec_server_forks_total\{memory="true",result="ok"\} 1\n/);

    const forks = await Promise.all(
      sessions.map((f) => TestSession.open(server.url, { resumeSessionId: f['sessionId'] })),
    );
    t.after(() => Promise.all(forks.map((f) => f.close())));
    const lastSeq = Math.max(...before.seqs);
    // The fork point: the source's last chunk before its pause (the longest silence the client saw).
    const read = await reader;
    const silence = (k: number): number => (read[k]?.at ?? 0) - (read[k - 1]?.at ?? Infinity);
    let gap = 1;
    for (let k = 2; k < read.length; k++) if (silence(k) > silence(gap)) gap = k;
    assert.ok(silence(gap) > 300, `the client saw the source pause (${silence(gap)} ms)`);
    const published = read.slice(0, gap);
    const forkPoint = published.at(-1)!.seq;
    for (const [i, f] of forks.entries()) {
      // Everything the source had published keeps its seq in the fork; what follows goes on from it.
      const mine = (await readUntil(f, 'lines', /(L\d+\n){3}/, forkPoint)).chunks;
      const all = (
        await f.request<{ chunks: Array<{ seq: number; chunk: string }> }>('process/read', {
          processId: 'lines',
          afterSeq: 0,
        })
      ).chunks;
      const seqs = all.map((c) => c.seq);
      assert.ok(
        seqs.every((q, k) => k === 0 || q > seqs[k - 1]!),
        `fork ${i}: seqs strictly increase: ${seqs}`,
      );
      const upTo = all.filter((c) => c.seq <= forkPoint).map((c) => [c.seq, Buffer.from(c.chunk, 'base64').toString()]);
      assert.deepEqual(
        upTo,
        published.map((c) => [c.seq, c.text]),
        `fork ${i}: the source's chunks, under their seqs`,
      );
      assert.ok(mine[0]!.seq === forkPoint + 1, `fork ${i}: new output from seq ${forkPoint + 1}, got ${mine[0]?.seq}`);
      assertConsecutive(published.map((c) => c.text).join('') + mine.map((c) => c.text).join(''), `fork ${i}`);
    }
    for (const [i, f] of forks.entries()) {
      const n = await counter(f, `fc${i}`);
      assert.ok(n >= atFork, `fork ${i}: the counter goes on from the fork point (${atFork}), read ${n}`);
      await sleep(200);
      assert.ok((await counter(f, `fd${i}`)) > n, `fork ${i}: and keeps counting`);
      // The same shell, by its id: the variable is still there and stdin answers.
      assert.equal(
        (await f.request('process/write', { processId: 'shell', chunk: b64(`echo got-$x-${i}\n`) }))['status'],
        'accepted',
      );
      const out = await readUntil(f, 'shell', new RegExp(`got-forty-two-${i}`), lastSeq);
      assert.ok(
        out.seqs.every((q) => q > lastSeq),
        `fork ${i}: seq continues past ${lastSeq}: ${out.seqs}`,
      );
      assert.equal((await f.run(`fw${i}`, ['sh', '-c', `echo fork-${i} > /workspace/mine`])).exited['exitCode'], 0);
      const host = (await f.run(`fh${i}`, ['hostname'])).stdout.trim();
      assert.equal(host, String(sessions[i]?.['containerId']).slice(0, 12), `fork ${i}: a hostname of its own`);
    }
    for (const [i, f] of forks.entries()) {
      const r = await f.run(`fr${i}`, ['cat', '/workspace/mine']);
      assert.equal(r.stdout, `fork-${i}\n`, `fork ${i} sees only its own write`);
    }
    assert.notEqual(
      (await s.run('r', ['sh', '-c', 'cat /workspace/mine 2>/dev/null || echo none'])).stdout,
      'fork-0\n',
    );
    // The source: its counter went on; its shell answers as before.
    const now = await counter(s, 'c1');
    assert.ok(now > atFork, `the source's counter went on (${atFork} -> ${now})`);
    await s.request('process/write', { processId: 'shell', chunk: b64('echo source-$x\n') });
    await readUntil(s, 'shell', /source-forty-two/, lastSeq);

    // Deleting the template: refused while forks use it; once they are gone, its checkpoint goes too.
    assert.equal((await readdir(dir)).length, 1, 'one checkpoint kept');
    for (const f of sessions)
      assert.equal((await http(server, 'DELETE', `/v1/sessions/${f['sessionId']}`)).status, 204);
    const del = await http(server, 'DELETE', `/v1/snapshots/${snapshot['snapshotId']}`);
    assert.equal(del.status, 204, JSON.stringify(del.body));
    assert.deepEqual(await readdir(dir), [], 'the checkpoint went with its snapshot');
    assert.match(await metrics(), /exec_server_memory_checkpoints 0\n/);
  },
);

test(
  'a live template starts sessions with their server answering; runc and too-large sessions are refused',
  dockerTestOptions,
  async (t) => {
    const { dir, server, s } = await checkpointing(t, 40, [
      '--allowed-runtimes',
      'runsc,runc',
      '--warm-pool-templates',
      'warm=1',
    ]);
    // A "server": a loop answering each request written to its fifo (warmed once, before the snapshot).
    const SERVER =
      'mkfifo /tmp/req; setsid sh -c \'exec 3<>/tmp/req; warm=$(date +%s); while read q <&3; do echo "answer-$q-warm-$warm" > /tmp/ans; done\' </dev/null >/dev/null 2>&1 &';
    // The server holds its fifo open both ways, so it never reads an end of file; the client
    // waits for the answer to its own request rather than for a fixed time.
    const ask = (session: TestSession, q: string) =>
      session.run('q', [
        'sh',
        '-c',
        `echo ${q} > /tmp/req; for i in $(seq 50); do grep -q "answer-${q}-" /tmp/ans 2>/dev/null && break; sleep 0.1; done; cat /tmp/ans`,
      ]);
    assert.equal((await s.run('srv', ['sh', '-c', SERVER])).exited['exitCode'], 0);
    const snap = await http(server, 'POST', `/v1/sessions/${s.sessionId}/snapshots`, { memory: true, name: 'warm' });
    assert.equal(snap.status, 201, JSON.stringify(snap.body));
    assert.equal(snap.body['memory'], true);
    assert.ok(Number(snap.body['checkpointBytes']) > 0);

    const fromTemplate = { session: { ...GVISOR, snapshot: snap.body['snapshotId'] } };
    const t0 = Date.now();
    const made = await TestSession.open(server.url, fromTemplate);
    const restoreMs = Date.now() - t0;
    t.after(() => made.close());
    const first = await ask(made, 'hello');
    assert.match(
      first.stdout,
      /^answer-hello-warm-\d+/,
      `the first command finds the server answering: ${first.stdout}${first.stderr}`,
    );

    // The template's pool (--warm-pool-templates warm=1): a session made from it claims a
    // container restored ahead of time, its server answering on the first command.
    const backend = server.backend as DockerBackend;
    let ready: string[] = [];
    for (const until = Date.now() + 30_000; ready.length === 0 && Date.now() < until; await sleep(100))
      ready = backend.templatePoolReady('warm');
    assert.equal(ready.length, 1, 'the template pool filled');
    const t1 = Date.now();
    const pooled = await TestSession.open(server.url, fromTemplate);
    const claimMs = Date.now() - t1;
    t.after(() => pooled.close());
    const info = await http(server, 'GET', `/v1/sessions/${pooled.sessionId}`);
    assert.ok(ready[0]?.startsWith(String(info.body['containerId'])), 'claimed from the pool, not restored on demand');
    const answer = await ask(pooled, 'pooled');
    assert.match(answer.stdout, /^answer-pooled-warm-\d+/, `${answer.stdout}${answer.stderr}`);
    t.diagnostic(`from a live template: restored on demand ${restoreMs} ms, claimed from its pool ${claimMs} ms`);

    // runc: a clear error naming the runtime, at once; a filesystem fork works as today.
    const runc = await TestSession.open(server.url, { session: { ...GVISOR, runtime: 'runc' } });
    t.after(() => runc.close());
    const tRunc = Date.now();
    const refused = await http(server, 'POST', `/v1/sessions/${runc.sessionId}/fork`, { count: 2, memory: true });
    assert.equal(refused.status, 501, JSON.stringify(refused.body));
    assert.equal(refused.body['code'], 'EXEC_ERR_UNSUPPORTED');
    assert.match(String(refused.body['message']), /runtime runc/);
    assert.ok(Date.now() - tRunc < 3000, 'refused at once');
    await runc.run('w', ['sh', '-c', 'echo files > /workspace/f']);
    const fsFork = await http(server, 'POST', `/v1/sessions/${runc.sessionId}/fork`, { count: 1 });
    assert.equal(fsFork.status, 201, JSON.stringify(fsFork.body));
    const copy = await TestSession.open(server.url, {
      resumeSessionId: (fsFork.body['sessions'] as Array<Record<string, unknown>>)[0]?.['sessionId'],
    });
    t.after(() => copy.close());
    assert.equal((await copy.run('r', ['cat', '/workspace/f'])).stdout, 'files\n');

    // Above --checkpoint-max-mb (40): refused with a clear error, the session untouched.
    // 48 MiB on the session's tmpfs (in the sandbox's memory under gVisor).
    await s.run('big', ['dd', 'if=/dev/zero', 'of=/dev/shm/big', 'bs=1M', 'count=48']);
    const big = await http(server, 'POST', `/v1/sessions/${s.sessionId}/fork`, { memory: true });
    assert.equal(big.status, 413, JSON.stringify(big.body));
    assert.match(String(big.body['message']), /above the 40 MiB/);
    assert.equal((await s.run('alive', ['echo', 'ok'])).stdout, 'ok\n');

    // The sessions made from the snapshots go, then the snapshots (and the template's checkpoint).
    for (const id of [made.sessionId, pooled.sessionId, copy.sessionId])
      assert.equal((await http(server, 'DELETE', `/v1/sessions/${id}`)).status, 204);
    const fsSnapshot = (fsFork.body['snapshot'] as Record<string, unknown>)['snapshotId'];
    for (const id of [snap.body['snapshotId'], fsSnapshot])
      assert.equal((await http(server, 'DELETE', `/v1/snapshots/${id}`)).status, 204);
    assert.deepEqual(await readdir(dir), []);
  },
);
