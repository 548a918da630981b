/**
 * The egress proxy's fast path (docs/architecture.md, "Egress"): once a connection is decided
 * and its destination connected, both sockets go to `exec-agent relay` (native/exec-agent-egress.c),
 * which splices them both ways and reports the bytes when done, so a download never crosses the
 * server's JavaScript. Used where both ends are real sockets (a tunnel on the agent link);
 * streams of another kind (gVisor's exec-stream tunnels) are piped by the proxy itself.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
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

function writeAll(s: Duplex, chunks: Buffer[]): Promise<void> {
  const data = Buffer.concat(chunks);
  if (data.length === 0) return Promise.resolve();
  return new Promise((resolve, reject) => s.write(data, (err) => (err ? reject(err) : resolve())));
}

export interface NativeRelay {
  readonly child: ChildProcess;
  /** Resolves when the relay ended, with the bytes it moved each way (session → destination, back). */
  readonly done: Promise<{ out: number; in: number }>;
}

/**
 * Hands the two sockets to a relay process. `toUpstream`/`toClient`: what must reach each side
 * first (the rewritten request head, the CONNECT answer). Reading stops on both before anything
 * is handed over, and whatever the streams had already buffered is sent on first, so no byte is
 * lost or reordered; the server's descriptors are closed once the child has its own.
 */
export async function relayNatively(
  client: Duplex,
  upstream: Socket,
  toUpstream: Buffer[],
  toClient: Buffer[],
): Promise<NativeRelay> {
  handleOf(client)?.readStop?.();
  handleOf(upstream)?.readStop?.();
  for (let c = client.read() as Buffer | null; c !== null; c = client.read() as Buffer | null) toUpstream.push(c);
  for (let c = upstream.read() as Buffer | null; c !== null; c = upstream.read() as Buffer | null) toClient.push(c);
  await Promise.all([writeAll(upstream, toUpstream), writeAll(client, toClient)]);
  const child = spawn(RELAY_BINARY as string, ['relay'], { stdio: [client as Socket, upstream, 'pipe'] });
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
      resolve({ out: Number.isFinite(out) ? out : 0, in: Number.isFinite(inBytes) ? inBytes : 0 });
    });
    child.once('error', () => resolve({ out: 0, in: 0 }));
  });
  return { child, done };
}
