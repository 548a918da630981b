/**
 * Forks with memory, measured side by side in one run against the local engine (runsc
 * registered, experimental mode; docs/snapshots.md), through a real server (HTTP and WebSocket):
 *   a Python REPL that imported a few modules and holds a variable, in a runsc session of the
 *   session image: fork it 1 and 4 ways with memory (from the request until every fork's REPL
 *   answered a statement through stdin) against a cold start (a new session plus the same REPL's
 *   start-up, until it answers), and their ratio; the source's pause (`pauseMs`);
 *   the checkpoint size of an idle shell session and of a REPL holding 100 MB of random data;
 *   a session from a live template of the REPL (`--warm-pool-templates`) until its REPL answers:
 *   claimed from the template's pool against restored on demand (the same spec plus a label,
 *   which no pool container matches), once the pool is full.
 * Usage: node --import tsx bench/fork-memory.ts
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DockerBackend } from '../src/backends/docker/docker-backend.ts';
import { startServer, TestSession, type TestServer } from '../test/support/harness.ts';

const IMAGE = process.env.EXEC_SERVER_SESSION_IMAGE ?? 'exec-server-session:latest';
const SESSION = { runtime: 'runsc', image: IMAGE, sandbox: { type: 'danger-full-access' }, approvalPolicy: 'never' };
/** The start-up a fork saves: the interpreter and a few imports, then state. */
const WARM = 'import json, decimal, fractions, email.parser, http.client, asyncio, sqlite3; state = 41\n';
/** Snapshot images this run made (removed at the end). */
const made: string[] = [];
const b64 = (s: string): string => Buffer.from(s).toString('base64');

async function http(server: TestServer, path: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`${server.httpUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const answer = (await res.json()) as Record<string, unknown>;
  if (res.status !== 201) throw new Error(`${path}: ${res.status} ${JSON.stringify(answer)}`);
  const id = (answer['snapshot'] as Record<string, unknown> | undefined)?.['snapshotId'] ?? answer['snapshotId'];
  made.push(String(id));
  return answer;
}

/** Output of `processId` after `afterSeq` until `pattern` shows. */
async function readUntil(s: TestSession, processId: string, pattern: RegExp, afterSeq = 0): Promise<number> {
  let text = '';
  let next = afterSeq;
  const deadline = Date.now() + 60_000;
  while (!pattern.test(text)) {
    if (Date.now() > deadline) throw new Error(`${processId}: ${pattern} not seen in ${JSON.stringify(text)}`);
    const r = await s.request<{ chunks: Array<{ seq: number; chunk: string }> }>('process/read', {
      processId,
      afterSeq: next,
      waitMs: 2000,
    });
    for (const c of r.chunks) {
      text += Buffer.from(c.chunk, 'base64').toString('utf8');
      next = Math.max(next, c.seq);
    }
  }
  return next;
}

/** Asks the REPL for its state through stdin and waits for the answer. */
async function ask(s: TestSession, tag: string, afterSeq: number): Promise<number> {
  await s.request('process/write', { processId: 'repl', chunk: b64(`print("${tag}", state + 1)\n`) });
  return readUntil(s, 'repl', new RegExp(`${tag} 42`), afterSeq);
}

async function startRepl(s: TestSession): Promise<number> {
  await s.start('repl', ['python3', '-i', '-u', '-q'], { pipeStdin: true });
  await s.request('process/write', { processId: 'repl', chunk: b64(WARM) });
  return ask(s, 'warm', 0);
}

async function coldStart(server: TestServer): Promise<{ ms: number; session: TestSession }> {
  const t0 = performance.now();
  const session = await TestSession.open(server.url, { session: SESSION });
  await startRepl(session);
  return { ms: performance.now() - t0, session };
}

async function fork(server: TestServer, source: TestSession, count: number, afterSeq: number) {
  const t0 = performance.now();
  const answer = await http(server, `/v1/sessions/${source.sessionId}/fork`, { count, memory: true });
  const ids = (answer['sessions'] as Array<Record<string, unknown>>).map((f) => String(f['sessionId']));
  const forks = await Promise.all(ids.map((id) => TestSession.open(server.url, { resumeSessionId: id })));
  await Promise.all(forks.map((f, i) => ask(f, `fork${i}`, afterSeq)));
  const ms = performance.now() - t0;
  const snapshot = answer['snapshot'] as Record<string, unknown>;
  return { ms, forks, snapshot, ids };
}

/** A session from the REPL's live template until its REPL answers: restored on demand, then claimed. */
async function fromTemplate(server: TestServer, source: TestSession, afterSeq: number): Promise<void> {
  const template = await http(server, `/v1/sessions/${source.sessionId}/snapshots`, { memory: true, name: 'repl' });
  const backend = server.backend as DockerBackend;
  for (const until = Date.now() + 120_000; backend.templatePoolReady('repl').length === 0; ) {
    if (Date.now() > until) throw new Error('the template pool did not fill');
    await new Promise((r) => setTimeout(r, 100));
  }
  const timed = async (labels: Record<string, string>): Promise<number> => {
    const t0 = performance.now();
    const session = { ...SESSION, snapshot: template['snapshotId'], labels };
    const s = await TestSession.open(server.url, { session });
    await ask(s, 'made', afterSeq);
    const ms = performance.now() - t0;
    await s.close();
    await fetch(`${server.httpUrl}/v1/sessions/${s.sessionId}`, { method: 'DELETE' });
    return ms;
  };
  const restored = await timed({ bench: 'on-demand' });
  const claimed = await timed({});
  console.log('\n| session from a live template, until its REPL answers | time | / restored |');
  console.log('|---|---:|---:|');
  console.log(`| restored on demand | ${restored.toFixed(0)} ms | 1.00x |`);
  console.log(`| claimed from the template's pool | ${claimed.toFixed(0)} ms | ${(claimed / restored).toFixed(2)}x |`);
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'exec-server-bench-checkpoints-'));
  const server = await startServer({
    backend: 'docker',
    flags: [
      ...['--allowed-runtimes', 'runsc', '--checkpoint-dir', dir, '--max-sessions-per-tenant', '64'],
      ...['--warm-pool-templates', 'repl=1'],
    ],
  });
  const cleanup: Array<() => Promise<unknown>> = [];
  try {
    const cold = await coldStart(server);
    cleanup.push(() => cold.session.close());
    const source = cold.session;
    const seq = await ask(source, 'again', 0);
    const one = await fork(server, source, 1, seq);
    const four = await fork(server, source, 4, seq);
    for (const f of [...one.forks, ...four.forks]) cleanup.push(() => f.close());
    const row = (what: string, ms: number): string =>
      `| ${what} | ${ms.toFixed(0)} ms | ${(ms / cold.ms).toFixed(2)}x |`;
    console.log('| case | time | / cold start |');
    console.log('|---|---:|---:|');
    console.log(row('cold start: runsc session + Python REPL start-up until it answers', cold.ms));
    console.log(row('fork 1 way with memory, until the fork answers', one.ms));
    console.log(row('fork 4 ways with memory, until all 4 answer', four.ms));
    console.log(
      `\nsource pause: ${one.snapshot['pauseMs']} ms (1 way), ${four.snapshot['pauseMs']} ms (4 ways); ` +
        `REPL checkpoint ${mb(one.snapshot['checkpointBytes'])}`,
    );

    await fromTemplate(server, source, seq);

    const idle = await TestSession.open(server.url, { session: SESSION });
    cleanup.push(() => idle.close());
    const idleSnap = await http(server, `/v1/sessions/${idle.sessionId}/snapshots`, { memory: true });
    await source.request('process/write', {
      processId: 'repl',
      chunk: b64('import os; data = os.urandom(100 * 1024 * 1024); print("held", len(data))\n'),
    });
    await readUntil(source, 'repl', /held 104857600/, seq);
    const bigSnap = await http(server, `/v1/sessions/${source.sessionId}/snapshots`, { memory: true });
    console.log(
      `checkpoint size: idle shell session ${mb(idleSnap['checkpointBytes'])} (pause ${idleSnap['pauseMs']} ms); ` +
        `REPL holding 100 MB ${mb(bigSnap['checkpointBytes'])} (pause ${bigSnap['pauseMs']} ms)`,
    );
  } finally {
    for (const c of cleanup) await c().catch(() => undefined);
    await server.close();
    // The snapshots made here go with the server's sessions; their images and checkpoints too.
    await rm(dir, { recursive: true, force: true });
    for (const id of made) execFileSync('docker', ['rmi', '-f', id], { stdio: 'ignore' });
  }
}

const mb = (bytes: unknown): string => `${(Number(bytes) / 1024 / 1024).toFixed(1)} MB`;

await main();
