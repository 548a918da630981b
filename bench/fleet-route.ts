/**
 * A command round trip through the replica of a fleet that did not make the session (its
 * WebSocket relayed to the owner, src/transport/fleet-ws.ts) against one through the replica
 * that did, side by side in one run: server processes with one --instance-id and --fleet on one
 * engine, one session made on the first; each round opens a connection that resumes the session
 * on one replica, runs N `true` (process/start to process/closed, one at a time) and closes;
 * rounds alternate owner / other replica. A third replica shares no directory with the engine
 * (`--docker-agent-socket-dir off`, as across Kubernetes nodes): it owns a session of its own,
 * whose agent it reaches through the engine's exec stream. Columns: the owner; the other
 * replica (relayed to the owner); the third replica relaying to the owner (a replica on another
 * node); the third replica's own session (what a replica without the directory pays when it
 * takes a session over). Target for the relays (issue 27): at most 1.2x the owner.
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

/** One column: the replica a connection goes to, and the session it resumes there. */
interface Side {
  readonly label: string;
  readonly url: string;
  readonly session: string;
}

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
    const sides: Side[] = [
      { label: 'owner', url: owner.url, session: id },
      { label: 'through the other replica', url: other.url, session: id },
      { label: 'through a replica without the link directory', url: nofs.url, session: id },
      { label: 'owner without the link directory (its agent through the engine)', url: nofs.url, session: far },
    ];
    for (const [i, side] of sides.entries()) await roundTrips(side.url, side.session, -1 - i); // warm-up
    const all = sides.map(() => [] as number[]);
    for (let r = 0; r < rounds; r++) {
      const medians: number[] = [];
      for (const [i, side] of sides.entries()) {
        const times = await roundTrips(side.url, side.session, sides.length * r + i);
        all[i]?.push(...times);
        medians.push(median(times));
      }
      console.log(`round ${r + 1}: ${describe(sides, medians)} (medians)`);
    }
    const load = loadavg()
      .map((l) => l.toFixed(2))
      .join(' ');
    const cpu = cpus()[0]?.model ?? 'cpu';
    console.log(
      `${commands} x ${rounds} round trips of \`true\` on ${availableParallelism()} CPUs (${cpu}), load ${load}:`,
    );
    console.log(describe(sides, all.map(median)));
  } finally {
    for (const r of [owner, other, nofs]) r.child.kill('SIGTERM');
    await sleep(3000);
  }
}

/** Each side's median and its ratio to the first side's (the owner's). */
function describe(sides: readonly Side[], medians: readonly number[]): string {
  const base = medians[0] ?? Number.NaN;
  return sides
    .map((side, i) => {
      const m = medians[i] ?? Number.NaN;
      return `${side.label} ${m.toFixed(2)} ms${i === 0 ? '' : ` (${(m / base).toFixed(2)}x)`}`;
    })
    .join(', ');
}

await main();
