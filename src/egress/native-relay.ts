/**
 * The egress proxy's fast path (docs/architecture.md, "Egress"): once a connection is decided
 * and its destination connected, both sockets go to `exec-agent relayd` (native/exec-agent-relay.c),
 * one process per session's proxy started at its first such connection and sent the sockets over
 * its IPC channel (`send(message, socket)`), which splices them both ways and reports the bytes
 * when done, so a download never crosses the server's JavaScript and no process is started per
 * connection (starting one forks the server, at a cost that grows with its memory). Used where
 * both ends are real sockets (a tunnel on the agent link); streams of another kind (gVisor's
 * exec-stream tunnels) are piped by the proxy itself.
 *
 * A tunnel that greeted `EXAGTUN2` (the agent offers its client's socket) waits for a mode byte
 * before anything else: `P` (plain: relay the tunnel as it is; every answer of the proxy itself)
 * or `F` (written just before the relay gets the tunnel; it takes the client's socket from the
 * agent, so the connection's bytes cross neither the agent nor the link).
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
  /** Resolves when the relay ended, with the bytes it moved each way (session → destination, back). */
  readonly done: Promise<{ out: number; in: number }>;
  /** Whether it took the client's socket from the agent. */
  readonly took: boolean;
  /** Ends the connection now (the session is gone); `done` still resolves with its bytes. */
  stop(): void;
}

interface Moved {
  out: number;
  in: number;
}

interface RelayDaemon {
  readonly child: ChildProcess;
  /** Connections sent and not reported yet, by id. */
  readonly waiting: Map<number, (m: Moved) => void>;
}

/** The relay process of one proxy, started when first needed (again after it ended). */
function startDaemon(onGone: (d: RelayDaemon) => void): RelayDaemon {
  // No environment of the server's (Node adds the channel's own variables).
  const child = spawn(RELAY_BINARY as string, ['relayd'], { stdio: ['ignore', 'ignore', 'ignore', 'ipc'], env: {} });
  const d: RelayDaemon = { child, waiting: new Map() };
  child.on('message', (m: { relay?: unknown; out?: unknown; in?: unknown }) => {
    if (typeof m.relay !== 'number') return;
    const w = d.waiting.get(m.relay);
    d.waiting.delete(m.relay);
    w?.({ out: Number(m.out) || 0, in: Number(m.in) || 0 });
  });
  // Gone: what it still relayed is reported as nothing moved, and the next connection starts another.
  const gone = (): void => {
    for (const w of d.waiting.values()) w({ out: 0, in: 0 });
    d.waiting.clear();
    onGone(d);
  };
  child.once('exit', gone);
  child.once('error', gone);
  // Only the server's own helper: it keeps the server alive no more than an idle socket would.
  child.unref();
  (child.channel as { unref?: () => void } | undefined)?.unref?.();
  return d;
}

function sendSocket(d: RelayDaemon, message: object, socket: Socket): Promise<void> {
  return new Promise((resolve, reject) => {
    d.child.send(message, socket, (err) => (err ? reject(err) : resolve()));
  });
}

/**
 * The native relay of one session's proxy: its own `exec-agent relayd`, so that a session whose
 * agent stalls the relay (a tenant can replace its agent, and with it the sockets it passes)
 * stalls only its own connections.
 */
export class NativeRelays {
  #daemon: RelayDaemon | undefined;
  #nextId = 1;
  #closed = false;

  /**
   * Hands the two sockets to the relay. `toUpstream`/`toClient`: what must reach each side first
   * (the rewritten request head, the CONNECT answer). Reading stops on both before anything is
   * handed over, and whatever the streams had already buffered is sent on first, so no byte is
   * lost or reordered; the server's descriptors are closed once the relay has its own. Bytes the
   * server had already read from the destination are counted in `done`'s `in`.
   */
  async relay(client: Duplex, upstream: Socket, toUpstream: Buffer[], toClient: Buffer[]): Promise<NativeRelay> {
    const take = awaitingMode.delete(client);
    let early = 0;
    for (let c = client.read() as Buffer | null; c !== null; c = client.read() as Buffer | null) toUpstream.push(c);
    for (let c = upstream.read() as Buffer | null; c !== null; c = upstream.read() as Buffer | null) {
      toClient.push(c);
      early += c.length;
    }
    // After the buffers are drained (read() starts reading again): nothing more is read here, so
    // every later byte waits in the kernel for the relay, across the awaits below.
    handleOf(client)?.readStop?.();
    handleOf(upstream)?.readStop?.();
    // `take`: the agent is asked for its client's socket now, so it hands it over meanwhile; what
    // the client gets first goes to the relay, which writes it once it has the socket.
    await Promise.all([writeAll(upstream, toUpstream), writeAll(client, take ? [Buffer.from('F')] : toClient)]);
    if (this.#closed) throw new Error('the session is gone');
    this.#daemon ??= startDaemon((gone) => {
      if (this.#daemon === gone) this.#daemon = undefined;
    });
    const d = this.#daemon;
    const id = this.#nextId++;
    const done = new Promise<Moved>((resolve) => d.waiting.set(id, resolve)).then((m) => ({
      out: m.out,
      in: m.in + early,
    }));
    client.removeAllListeners('close');
    upstream.removeAllListeners('close');
    // Sent as a socket of no server: a server's socket would make Node track it in the child
    // (NODE_SOCKET_* messages the relay does not speak); the link server still counts it until
    // its destroy() below, as any connection of its own.
    (client as unknown as { server: unknown }).server = null;
    try {
      await sendSocket(d, { relay: id, part: 'client', take: take ? 1 : 0 }, client as Socket);
      const first = take ? Buffer.concat(toClient).toString('hex') : '';
      await sendSocket(d, { relay: id, part: 'upstream', early: first }, upstream);
    } catch (err) {
      d.waiting.get(id)?.({ out: 0, in: 0 });
      d.waiting.delete(id);
      if (d.child.connected) d.child.send({ relay: id, stop: 1 });
      throw err;
    } finally {
      client.destroy();
      upstream.destroy();
    }
    return {
      done,
      took: take,
      stop: () => {
        if (d.child.connected) d.child.send({ relay: id, stop: 1 });
      },
    };
  }

  /** Stops every connection (each still reports its bytes), then lets the process go. */
  close(): void {
    this.#closed = true;
    const d = this.#daemon;
    this.#daemon = undefined;
    if (d === undefined || !d.child.connected) return;
    for (const id of d.waiting.keys()) d.child.send({ relay: id, stop: 1 });
    // The reports come back first; a process that does not answer in time is ended.
    const end = (): void => {
      if (d.child.connected) d.child.disconnect();
    };
    if (d.waiting.size === 0) end();
    else {
      const all = [...d.waiting.entries()];
      for (const [id, w] of all)
        d.waiting.set(id, (m) => {
          w(m);
          if (d.waiting.size === 0) end();
        });
      setTimeout(() => {
        if (d.child.exitCode === null) d.child.kill('SIGKILL');
      }, 1000).unref();
    }
  }
}
