/**
 * A command round trip through the replica of a fleet that did not make the session (its
 * WebSocket relayed to the owner, src/transport/fleet-ws.ts) against one through the replica
 * that did, side by side in one run: server processes with one --instance-id and --fleet on one
 * engine, one session made on the first; each round opens a connection that resumes the session
 * on one replica, runs N `true` (process/start to process/closed, one at a time) and closes;
 * rounds alternate owner / other replica. A third replica shares no directory with the engine
 * (`--docker-agent-socket-dir off`, as across Kubernetes nodes): it owns a session of its own,
 * whose agent it reaches through the engine's exec stream; its round trips are the third column.
 * Usage: node --import tsx bench/fleet-route.ts [commands=200] [rounds=3]
 */
import { randomUUID } from 'node:crypto';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { type DevServer, startDevServer } from '../test/support/dev-server.ts';
import { sleep, TestSession } from '../test/support/harness.ts';

const commands = Number(process.argv[2] ?? 200);
const rounds = Number(process.argv[3] ?? 3);
const IMAGE = process.env.EXEC_SERVER_TEST_IMAGE ?? 'exec-server-test:latest';
const instanceId = `bench-fleet-${randomUUID().slice(0, 8)}`;

function replica(name: string, extra: readonly string[] = []): Promise<DevServer> {
  return startDevServer({
    image: IMAGE,
    instanceId,
    flags: ['--fleet', '--replica-id', name, ...extra],
    stderr: 'inherit',
  });
}

/** Milliseconds of each of `commands` round trips of `true` through `url`, resuming `sessionId`. */
async function roundTrips(url: string, sessionId: string, round: number): Promise<number[]> {
  const s = await TestSession.open(url, { resumeSessionId: sessionId });
  const times: number[] = [];
  for (let i = 0; i < commands; i++) {
    const t0 = performance.now();
    await s.run(`r${round}-${i}`, ['true']);
    times.push(performance.now() - t0);
  }
  await s.close();
  return times;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

async function main(): Promise<void> {
  const owner = await replica('owner');
  const other = await replica('other');
  const nofs = await replica('nofs', ['--docker-agent-socket-dir', 'off']);
  try {
    const open = async (url: string): Promise<string> => {
      const made = await TestSession.open(url, { session: { sandbox: { type: 'danger-full-access' } } });
      await made.close();
      return made.sessionId;
    };
    const id = await open(owner.url);
    const far = await open(nofs.url);
    await roundTrips(owner.url, id, -1); // warm-up of every path
    await roundTrips(other.url, id, -2);
    await roundTrips(nofs.url, far, -3);
    const all = { owner: [] as number[], other: [] as number[], nofs: [] as number[] };
    for (let r = 0; r < rounds; r++) {
      const a = await roundTrips(owner.url, id, 3 * r);
      const b = await roundTrips(other.url, id, 3 * r + 1);
      const c = await roundTrips(nofs.url, far, 3 * r + 2);
      all.owner.push(...a);
      all.other.push(...b);
      all.nofs.push(...c);
      console.log(
        `round ${r + 1}: owner ${median(a).toFixed(2)} ms, other replica ${median(b).toFixed(2)} ms (${(median(b) / median(a)).toFixed(2)}x), owner without the link directory ${median(c).toFixed(2)} ms (${(median(c) / median(a)).toFixed(2)}x) (medians)`,
      );
    }
    const m = { owner: median(all.owner), other: median(all.other), nofs: median(all.nofs) };
    console.log(
      `${commands} x ${rounds} round trips of \`true\` on ${availableParallelism()} CPUs (${cpus()[0]?.model ?? 'cpu'}), load ${loadavg()
        .map((l) => l.toFixed(2))
        .join(
          ' ',
        )}: owner ${m.owner.toFixed(2)} ms, through the other replica ${m.other.toFixed(2)} ms (${(m.other / m.owner).toFixed(2)}x), owner through the engine ${m.nofs.toFixed(2)} ms (${(m.nofs / m.owner).toFixed(2)}x)`,
    );
  } finally {
    for (const r of [owner, other, nofs]) r.child.kill('SIGTERM');
    await sleep(3000);
  }
}

await main();
