/**
 * The egress proxy's fast path (docs/architecture.md, "Egress"): once a connection is decided
 * and its destination connected, both sockets go to `exec-agent relay` (native/exec-agent-relay.c),
 * which splices them both ways and reports the bytes when done, so a download never crosses the
 * server's JavaScript. Used where both ends are real sockets (a tunnel on the agent link);
 * streams of another kind (gVisor's exec-stream tunnels) are piped by the proxy itself.
 *
 * A tunnel that greeted `EXAGTUN2` (the agent offers its client's socket) waits for a mode byte
 * before anything else: `P` (plain: relay the tunnel as it is; every answer of the proxy itself)
 * or `F` (`exec-agent relay take` writes it and takes the client's socket from the agent, so the
 * connection's bytes cross neither the agent nor the link).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { Socket } from 'node:net';
import type { Duplex, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';

/** The static agent binary of this build (build/exec-agent); undefined when it was not built. */
export const RELAY_BINARY: string | undefined = ((): string | undefined => {
  const path = fileURLToPath(new URL('../../build/exec-agent', import.meta.url));
  return existsSync(path) ? path : undefined;
})();

interface HandleLike {
  readStop?: () => number;
  fd?: number;
}

function handleOf(s: Duplex): HandleLike | undefined {
  if (!(s instanceof Socket)) return undefined;
  return (s as unknown as { _handle?: HandleLike | null })._handle ?? undefined;
}

/** Whether `client` and `upstream` can be handed to the native relay. */
export function canRelayNatively(client: Duplex, upstream: Socket): boolean {
  return RELAY_BINARY !== undefined && handleOf(client)?.readStop !== undefined && handleOf(upstream) !== undefined;
}

/** Tunnels that still wait for their mode byte (EXAGTUN2). */
const awaitingMode = new WeakSet<Duplex>();

/** `client` is a tunnel whose agent can hand over its client's socket: it waits for a mode byte. */
export function offersClientSocket(client: Duplex): void {
  awaitingMode.add(client);
}

/** Before the proxy writes anything of its own on `client`: the tunnel is relayed as it is. */
export function plainTunnel(client: Duplex): void {
  if (awaitingMode.delete(client)) client.write('P');
}

function writeAll(s: Duplex, chunks: Buffer[]): Promise<void> {
  const data = Buffer.concat(chunks);
  if (data.length === 0) return Promise.resolve();
  return new Promise((resolve, reject) => s.write(data, (err) => (err ? reject(err) : resolve())));
}

export interface NativeRelay {
  readonly child: ChildProcess;
  /** Resolves when the relay ended, with the bytes it moved each way (session → destination, back). */
  readonly done: Promise<{ out: number; in: number }>;
  /** Whether it took the client's socket from the agent (`relay take`). */
  readonly took: boolean;
}

/**
 * Hands the two sockets to a relay process. `toUpstream`/`toClient`: what must reach each side
 * first (the rewritten request head, the CONNECT answer). Reading stops on both before anything
 * is handed over, and whatever the streams had already buffered is sent on first, so no byte is
 * lost or reordered; the server's descriptors are closed once the child has its own. Bytes the
 * server had already read from the destination are counted in `done`'s `in`.
 */
export async function relayNatively(
  client: Duplex,
  upstream: Socket,
  toUpstream: Buffer[],
  toClient: Buffer[],
): Promise<NativeRelay> {
  handleOf(client)?.readStop?.();
  handleOf(upstream)?.readStop?.();
  const take = awaitingMode.delete(client);
  let early = 0;
  for (let c = client.read() as Buffer | null; c !== null; c = client.read() as Buffer | null) toUpstream.push(c);
  for (let c = upstream.read() as Buffer | null; c !== null; c = upstream.read() as Buffer | null) {
    toClient.push(c);
    early += c.length;
  }
  await Promise.all([writeAll(upstream, toUpstream), take ? undefined : writeAll(client, toClient)]);
  const child = take
    ? spawn(RELAY_BINARY as string, ['relay', 'take'], { stdio: [client as Socket, upstream, 'pipe', 'pipe'] })
    : spawn(RELAY_BINARY as string, ['relay'], { stdio: [client as Socket, upstream, 'pipe'] });
  // `take`: what the client gets first goes to the relay, which writes it once it has the socket.
  const first = child.stdio[3] as Writable | null | undefined;
  first?.on('error', () => undefined);
  first?.end(Buffer.concat(toClient));
  client.removeAllListeners('close');
  client.destroy();
  upstream.removeAllListeners('close');
  upstream.destroy();
  let report = '';
  child.stderr?.on('data', (d: Buffer) => {
    report += d.toString();
  });
  const done = new Promise<{ out: number; in: number }>((resolve) => {
    child.once('close', () => {
      const [out = 0, inBytes = 0] = report.trim().split(' ').map(Number);
      resolve({ out: Number.isFinite(out) ? out : 0, in: early + (Number.isFinite(inBytes) ? inBytes : 0) });
    });
    child.once('error', () => resolve({ out: 0, in: early }));
  });
  return { child, done, took: take };
}
