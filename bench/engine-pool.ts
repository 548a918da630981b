/**
 * Session creation spread over a pool of two engines against one engine, side by side in one
 * run (`--docker-host a,b`, src/backends/docker/engine-pool.ts): N sessions created C at a time
 * to their first command closed, then removed; rounds alternate one engine / the pool. The
 * second engine is started by the bench (test/support/second-engine.ts: its own data root,
 * exec root, socket and bridge). On one machine both engines share its CPUs: the figure shows
 * what placement costs and how far a second engine on the same host helps, not a second host.
 * Usage: node --import tsx bench/engine-pool.ts [sessions=32] [concurrency=8] [rounds=2]
 */
import { randomUUID } from 'node:crypto';
import { availableParallelism, cpus } from 'node:os';
import { createDockerEngines } from '../src/backends/docker/index.ts';
import type { Backend, BackendSession, ProcessSink } from '../src/backends/types.ts';
import { asTenantId } from '../src/ids.ts';
import { silentLogger } from '../src/logger.ts';
import { sessionSpec, spawnRequest } from '../test/docker/helpers.ts';
import { SECOND_ENGINE_HOST, startSecondEngine } from '../test/support/second-engine.ts';

const sessions = Number(process.argv[2] ?? 32);
const concurrency = Number(process.argv[3] ?? 8);
const rounds = Number(process.argv[4] ?? 2);
const IMAGE = process.env.EXEC_SERVER_TEST_IMAGE ?? 'exec-server-test:latest';
const FIRST = 'unix:///var/run/docker.sock';

function firstCommand(s: BackendSession): Promise<void> {
  return new Promise((resolve, reject) => {
    const sink: ProcessSink = {
      output: () => {},
      exit: (e) => (e.kind === 'exited' && e.code === 0 ? resolve() : reject(new Error(`true ended ${e.kind}`))),
    };
    s.spawn(spawnRequest(['true']), sink).catch(reject);
  });
}

/** Seconds to create `sessions` sessions `concurrency` at a time, each to its first command closed. */
async function burst(backend: Backend): Promise<number> {
  const made: BackendSession[] = [];
  let next = 0;
  const t0 = performance.now();
  const worker = async (): Promise<void> => {
    while (next < sessions) {
      next++;
      const s = await backend.createSession(
        sessionSpec({ tenant: asTenantId('bench'), resources: { memoryMb: 256, cpus: 1, pids: 128 } }),
      );
      made.push(s);
      await firstCommand(s);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - t0) / 1000;
  await Promise.all(made.map((s) => s.destroy()));
  return seconds;
}

async function main(): Promise<void> {
  const engine2 = await startSecondEngine(IMAGE);
  const one = createDockerEngines(
    [FIRST],
    { defaultImage: IMAGE, instanceId: `bench-one-${randomUUID().slice(0, 8)}` },
    silentLogger,
  );
  const pool = createDockerEngines(
    [FIRST, SECOND_ENGINE_HOST],
    { defaultImage: IMAGE, instanceId: `bench-pool-${randomUUID().slice(0, 8)}` },
    silentLogger,
  );
  await one.recover();
  await pool.recover();
  await burst(one); // warm-up of both paths (image layers, agent copy)
  await burst(pool);
  const figures: { one: number; pool: number }[] = [];
  for (let r = 0; r < rounds; r++) {
    const a = await burst(one);
    const b = await burst(pool);
    figures.push({ one: a, pool: b });
    console.log(
      `round ${r + 1}: one engine ${a.toFixed(2)} s (${(sessions / a).toFixed(1)}/s), pool of two ${b.toFixed(2)} s (${(sessions / b).toFixed(1)}/s), pool/one ${(a / b).toFixed(2)}x`,
    );
  }
  const sum = (k: 'one' | 'pool'): number => figures.reduce((n, f) => n + f[k], 0);
  console.log(
    `${sessions} sessions, ${concurrency} at a time, ${rounds} rounds on ${availableParallelism()} CPUs (${cpus()[0]?.model ?? 'cpu'}): the pool creates at ${(sum('one') / sum('pool')).toFixed(2)}x the rate of one engine`,
  );
  await one.close();
  await pool.close();
  await engine2.stop();
}

await main();
