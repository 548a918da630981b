/**
 * The egress proxy's fast path (docs/architecture.md, "Egress"): once a connection is decided
 * and its destination connected, both sockets go to `exec-agent relayd` (native/exec-agent-relay.c),
 * one process per session's proxy started at its first such connection and sent the sockets over
 * its IPC channel (`send(message, socket)`), which splices them both ways and reports the bytes
 * when done (and a long connection's as it goes, so a relay that dies loses at most its last half
 * second of counts), so a download never crosses the server's JavaScript and no process is started
 * per connection (starting one forks the server, at a cost that grows with its memory). Used where
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

/** Bytes a relayed connection moved: session → destination, and back. */
export interface Moved {
  out: number;
  in: number;
}

/** How a relayed connection ended: its bytes, and why when its relay process died under it. */
export interface RelayEnd extends Moved {
  /** Set when the relay process ended first: the bytes are those it last reported. */
  readonly died?: string | undefined;
}

/** A relay process that ended unasked (a crash, an OOM kill) or with connections still open. */
export interface RelayExit {
  readonly pid: number | undefined;
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  /** Connections it carried, now ended with the bytes it last reported. */
  readonly open: number;
}

/** One connection handed to the session's relay process: its end with the bytes moved, and a way to end it. */
export interface NativeRelay {
  /** Resolves when the relay ended, with the bytes it moved each way (session → destination, back). */
  readonly done: Promise<RelayEnd>;
  /** Whether it took the client's socket from the agent. */
  readonly took: boolean;
  /** Ends the connection now (the session is gone); `done` still resolves with its bytes. */
  stop(): void;
}

/** A connection sent to the relay and not ended yet. */
interface Open {
  /** Its totals as last reported (what it counts for should the process die). */
  last: Moved;
  progress: (m: Moved) => void;
  finish: (e: RelayEnd) => void;
}

interface RelayDaemon {
  readonly child: ChildProcess;
  /** Connections sent and not ended yet, by id. */
  readonly open: Map<number, Open>;
  /** close() asked it to end. */
  ending: boolean;
}

interface RelayMessage {
  relay?: unknown;
  out?: unknown;
  in?: unknown;
  progress?: unknown;
}

function onMessage(d: RelayDaemon, m: RelayMessage): void {
  if (typeof m.relay !== 'number') return;
  const o = d.open.get(m.relay);
  if (o === undefined) return;
  const moved = { out: Number(m.out) || 0, in: Number(m.in) || 0 };
  if (m.progress === 1) {
    o.last = moved;
    o.progress(moved);
    return;
  }
  d.open.delete(m.relay);
  o.finish(moved);
}

/** Why the connections of a relay that ended ended. */
function deathReason(code: number | null, signal: NodeJS.Signals | null): string {
  const how = signal !== null ? `signal ${signal}` : code !== null ? `exit code ${code}` : 'failed to start';
  return `the egress relay process ended (${how}): bytes as last reported`;
}

/** The relay process of one proxy, started when first needed (again after it ended). */
function startDaemon(onGone: (d: RelayDaemon, e: RelayExit) => void): RelayDaemon {
  // No environment of the server's (Node adds the channel's own variables).
  const child = spawn(RELAY_BINARY as string, ['relayd'], { stdio: ['ignore', 'ignore', 'ignore', 'ipc'], env: {} });
  const d: RelayDaemon = { child, open: new Map(), ending: false };
  child.on('message', (m: RelayMessage) => onMessage(d, m));
  // Gone: what it still carried ends with the bytes it last reported (its reports are read to the
  // end first: the channel closes after the process exits), and the next connection starts another.
  let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  let over = false;
  const gone = (failed = false): void => {
    if (over || exit === undefined || (child.connected && !failed)) return;
    over = true;
    const open = [...d.open.values()];
    d.open.clear();
    const died = deathReason(exit.code, exit.signal);
    for (const o of open) o.finish({ ...o.last, died });
    onGone(d, { pid: child.pid, code: exit.code, signal: exit.signal, open: open.length });
  };
  child.once('exit', (code, signal) => {
    exit = { code, signal };
    gone();
  });
  child.once('disconnect', () => gone());
  child.once('error', () => {
    // Spawning failed (no 'exit' follows); any other error is followed by 'exit' if it matters.
    if (child.pid !== undefined) return;
    exit = { code: null, signal: null };
    gone(true);
  });
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
 * stalls only its own connections. Should the process die, its connections end with the bytes
 * it last reported (`done`'s `died`), `onExit` hears of it, and the next connection starts another.
 */
export class NativeRelays {
  #daemon: RelayDaemon | undefined;
  #nextId = 1;
  #closed = false;
  readonly #onExit: ((e: RelayExit) => void) | undefined;

  constructor(options: { onExit?: ((e: RelayExit) => void) | undefined } = {}) {
    this.#onExit = options.onExit;
  }

  /** The process of the connections sent now: the running one, or a new one. */
  #current(): RelayDaemon {
    // One that died may not have said so yet (its channel is already closed): not used again.
    const running = this.#daemon;
    if (running?.child.connected) return running;
    const d = startDaemon((gone, e) => {
      if (this.#daemon === gone) this.#daemon = undefined;
      if (e.open > 0 || !gone.ending) this.#onExit?.(e);
    });
    this.#daemon = d;
    return d;
  }

  /**
   * Hands the two sockets to the relay. `toUpstream`/`toClient`: what must reach each side first
   * (the rewritten request head, the CONNECT answer). Reading stops on both before anything is
   * handed over, and whatever the streams had already buffered is sent on first, so no byte is
   * lost or reordered; the server's descriptors are closed once the relay has its own. Bytes the
   * server had already read from the destination are counted in `done`'s `in`. `progress`: the
   * totals so far of a long connection, at most every half second while bytes move.
   */
  async relay(
    client: Duplex,
    upstream: Socket,
    toUpstream: Buffer[],
    toClient: Buffer[],
    progress: (m: Moved) => void = () => undefined,
  ): Promise<NativeRelay> {
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
    // Not a registry error: the proxy records it as the connection's reason.
    if (this.#closed) throw new Error('the session is gone');
    const d = this.#current();
    const id = this.#nextId++;
    const withEarly = (m: Moved): Moved => ({ out: m.out, in: m.in + early });
    const done = new Promise<RelayEnd>((resolve) =>
      d.open.set(id, {
        last: { out: 0, in: 0 },
        progress: (m) => progress(withEarly(m)),
        finish: (e) => resolve({ ...e, ...withEarly(e) }),
      }),
    );
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
      d.open.get(id)?.finish({ out: 0, in: 0 });
      d.open.delete(id);
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
    d.ending = true;
    for (const id of d.open.keys()) d.child.send({ relay: id, stop: 1 });
    // The reports come back first; a process that does not answer in time is ended.
    const end = (): void => {
      if (d.child.connected) d.child.disconnect();
    };
    if (d.open.size === 0) end();
    else {
      for (const o of d.open.values()) {
        const finish = o.finish;
        o.finish = (e) => {
          finish(e);
          if (d.open.size === 0) end();
        };
      }
      setTimeout(() => {
        if (d.child.exitCode === null) d.child.kill('SIGKILL');
      }, 1000).unref();
    }
  }
}
