/**
 * One connection from the server to a session's exec agent: the agent's own connection to the
 * server's link where the container has one (agent-link.ts), else an attached `exec-agent
 * attach` exec whose stream the daemon speaks on (agent-protocol.ts). Frames are routed to the
 * process that owns their handle; replies to requests (hello, spawn, list) are awaited with a
 * deadline. The connection can end (server detach, agent killed, engine gone) without the
 * daemon's processes ending; `AgentChannel` decides what that means for them.
 */
import { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import {
  AgentStreamParser,
  encodeHello,
  HelloFlag,
  frame,
  FromAgent,
  malformed,
  ToAgent,
  type AgentFrame,
} from './agent-protocol.ts';
import { AgentListing, type ListedProcess } from './agent-listing.ts';
import { LINK_IN_CONTAINER, type AgentLink } from './agent-link.ts';
import { readIntoSharedBuffer } from './link-reader.ts';
import { AGENT_DIR } from '../container/container-config.ts';
import { runControl, startExec } from '../exec/exec-runner.ts';
import type { DockerLogger } from '../options.ts';

/** Where the agent lives in a session container (root-only; see docs/docker-backend.md). */
export { AGENT_DIR };
/** The agent's binary inside a session container. */
export const AGENT_PATH = `${AGENT_DIR}/exec-agent`;

/** How long a frame sent with `sendLater` waits at most for an urgent one to ride with. */
const LATER_MS = 20;

/** What a process handle receives. */
export interface HandleListener {
  frame(f: AgentFrame): void;
}

export type { ListedProcess };

/**
 * How a connection reaches the daemon: `socket` over the agent link (output crosses neither
 * the engine nor its shim), `exec-stream` through an attached engine exec.
 */
export type AgentTransport = 'socket' | 'exec-stream';

/** How a connection to a session's agent is opened: through its link, or an attached exec. */
export interface AgentConnectOptions {
  readonly container: Docker.Container;
  /** The daemon's socket inside the container. */
  readonly socketPath: string;
  /** The server's listener this container's agent connects out to, when it has one. */
  readonly link?: AgentLink | undefined;
  readonly timeoutMs: number;
  readonly retentionBytes: number;
  readonly windowBytes: number;
  /** Gather a terminal streaming fast on one CPU with the agent (`--pty-pin`; native/pty-pin.h). */
  readonly ptyPinning: boolean;
  readonly log: DockerLogger;
}

/** One connection to a session's agent: frames to the processes that own their handles, replies with a deadline. */
export class AgentConnection {
  readonly #socket: Duplex;
  readonly #log: DockerLogger;
  readonly #listeners = new Map<number, HandleListener>();
  readonly #waiting = new Map<number, (f: AgentFrame) => void>();
  #onHello: ((f: AgentFrame) => void) | undefined;
  #listing: AgentListing | undefined;
  readonly #retentionBytes: number;
  #closed = false;
  #closeReason = 'agent connection closed';
  #detaching = false;
  /** Frames that may wait for the next urgent one (`sendLater`). */
  #later: Buffer[] = [];
  #laterTimer: NodeJS.Timeout | undefined;
  readonly #closedListeners: Array<(reason: string) => void> = [];
  /** An egress client waits for its tunnel process (no link; exec-agent-egress.c): its id. */
  onTunnel: ((id: number) => void) | undefined;
  /** The agent daemon's pid (inside the container), from its hello. */
  agentPid = 0;
  /** When, by this server's clock, a server last noted the session used (hello's `idle=`). */
  notedAt: number | undefined;
  readonly transport: AgentTransport;

  private constructor(socket: Duplex, log: DockerLogger, transport: AgentTransport, retentionBytes: number) {
    this.#log = log;
    this.transport = transport;
    this.#retentionBytes = retentionBytes;
    const parser = new AgentStreamParser(
      (f) => this.#take(f),
      (text) => log.warn({ agent: text.toString('utf8').trim().slice(0, 500) }, 'exec agent stderr'),
      (err) => this.#end(`exec agent stream broken: ${err.message}`),
      transport === 'socket' ? 'raw' : 'docker',
    );
    // A link's socket reads into the server's shared buffer (link-reader.ts): frames are views.
    const moved =
      transport === 'socket' && socket instanceof Socket
        ? readIntoSharedBuffer(socket, (d) => parser.push(d))
        : undefined;
    if (moved !== undefined) socket = moved;
    else {
      socket.on('data', (d: Buffer) => parser.push(d));
      // A link's socket is handed over paused (agent-link.ts): a listener alone does not resume it.
      if (transport === 'socket') socket.resume();
    }
    this.#socket = socket;
    socket.on('error', (err) => log.debug({ err: err.message }, 'exec agent stream error'));
    socket.once('close', () => this.#end(this.#closeReason));
  }

  /** Attaches to the agent (starting it when none runs) and exchanges hellos. */
  static async connect(o: AgentConnectOptions): Promise<AgentConnection> {
    const direct = o.link === undefined ? undefined : await connectLink(o, o.link);
    const socket =
      direct ??
      (
        await startExec(
          o.container,
          {
            Cmd: [AGENT_PATH, 'attach', o.socketPath],
            User: '0:0',
            Tty: false,
            AttachStdin: true,
            AttachStdout: true,
            AttachStderr: true,
          },
          o.timeoutMs,
        )
      ).socket;
    const conn = new AgentConnection(socket, o.log, direct ? 'socket' : 'exec-stream', o.retentionBytes);
    try {
      const hello = await conn.#await('hello', o.timeoutMs, (resolve) => {
        conn.#onHello = resolve;
        conn.#socket.write(encodeHello(o.retentionBytes, o.windowBytes, o.ptyPinning ? HelloFlag.PTY_PIN : 0));
      });
      if (hello.type === FromAgent.ERROR)
        throw execError('EXEC_ERR_BACKEND', `exec agent refused the connection: ${hello.payload.toString('utf8')}`);
      const text = hello.payload.toString('utf8');
      conn.agentPid = Number(/pid=(\d+)/.exec(text)?.[1] ?? 0);
      const idle = /idle=(\d+)/.exec(text)?.[1];
      conn.notedAt = idle === undefined ? undefined : Date.now() - Number(idle);
      return conn;
    } catch (err) {
      conn.close();
      throw err;
    }
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** A detach was asked: the agent reads nothing more from this connection (acknowledgements included). */
  get detaching(): boolean {
    return this.#detaching;
  }

  onClose(listener: (reason: string) => void): void {
    if (this.#closed) queueMicrotask(() => listener(this.#closeReason));
    else this.#closedListeners.push(listener);
  }

  listen(handle: number, listener: HandleListener): void {
    this.#listeners.set(handle, listener);
  }

  unlisten(handle: number): void {
    this.#listeners.delete(handle);
  }

  /**
   * Whether the connection keeps the event loop alive. The engine's upgraded socket may come
   * from an idle (unref'd) keep-alive socket; while a command runs or a reply is awaited the
   * connection must hold the process open, and it must not once nothing is pending.
   */
  hold(on: boolean): void {
    const s = this.#socket as Duplex & { ref?: () => void; unref?: () => void };
    if (on) s.ref?.();
    else s.unref?.();
  }

  send(data: Buffer): void {
    if (this.#closed) return;
    if (this.#later.length === 0) {
      this.#socket.write(data);
      return;
    }
    // What waited rides along: one write, one wake-up of the agent.
    this.#later.push(data);
    this.#flushLater();
  }

  /**
   * Sends `data` with the next frame that must go now, or within `LATER_MS`: for frames no one
   * waits on (a process forgotten, credit far below the window). Each write to the agent wakes
   * it; a `true` round trip used to cost two (the previous command's FORGET, then the spawn).
   * Frames keep their order: an urgent `send` writes what waits first.
   */
  sendLater(data: Buffer): void {
    if (this.#closed) return;
    this.#later.push(data);
    if (this.#laterTimer === undefined) {
      this.#laterTimer = setTimeout(() => this.#flushLater(), LATER_MS);
      this.#laterTimer.unref();
    }
  }

  #flushLater(): void {
    clearTimeout(this.#laterTimer);
    this.#laterTimer = undefined;
    if (this.#later.length === 0) return;
    const all = this.#later.length === 1 ? (this.#later[0] as Buffer) : Buffer.concat(this.#later);
    this.#later = [];
    if (!this.#closed) this.#socket.write(all);
  }

  /** Sends `request` for `handle` and resolves with the agent's first reply for it. */
  request(handle: number, request: Buffer, timeoutMs: number): Promise<AgentFrame> {
    return this.#await(`request for handle ${handle}`, timeoutMs, (resolve) => {
      this.#waiting.set(handle, resolve);
      this.send(request);
    });
  }

  /**
   * Every process the agent keeps, with its retained output and exit. `onListed` runs
   * synchronously when the list ends, before any later frame is routed, so it can bind
   * listeners without missing live output.
   */
  async list(timeoutMs: number, onListed: (listed: ListedProcess[]) => void): Promise<void> {
    await this.#await<ListedProcess[]>('list', timeoutMs, (resolve) => {
      this.#listing = new AgentListing(this.#retentionBytes, (l) => {
        onListed(l);
        resolve(l);
      });
      this.send(frame(ToAgent.LIST, 0));
    }).catch((err: unknown) => {
      // A list that never ends must not keep collecting what the agent replays into it.
      this.#listing = undefined;
      this.close(`exec agent did not finish its list: ${(err as Error).message}`);
      throw err;
    });
  }

  /** Tells the agent the session was used now (its idle clock, for a server that takes it over). */
  note(): void {
    this.sendLater(frame(ToAgent.NOTE, 0));
  }

  /** Asks the agent to flush and let this connection go (its processes keep running). */
  detach(): void {
    this.send(frame(ToAgent.DETACH, 0));
    this.#detaching = true;
  }

  close(reason = 'agent connection closed'): void {
    this.#closeReason = reason;
    this.#flushLater();
    this.#socket.destroy();
  }

  /** Every frame from the agent: untrusted (the agent is root's in its container). */
  #take(f: AgentFrame): void {
    if (this.#closed) return;
    const bad = malformed(f);
    if (bad !== undefined) {
      this.#end(`exec agent sent a malformed frame: ${bad}`);
      return;
    }
    try {
      this.#route(f);
    } catch (err) {
      // Thrown while reading the link, it would be uncaught: it ends this connection, not the server.
      this.#log.warn({ err: (err as Error).message, type: f.type }, 'exec agent frame could not be handled');
      this.#end(`exec agent frame could not be handled: ${(err as Error).message}`);
    }
  }

  #route(f: AgentFrame): void {
    const l = f.type === FromAgent.ERROR ? undefined : this.#listing;
    const listed = l?.take(f) ?? 'other';
    if (listed === 'taken') return;
    if (listed === 'end') {
      this.#listing = undefined;
      l?.finish();
      return;
    }
    if (listed !== 'other') {
      this.#end(`exec agent list refused: ${listed.refused}`);
      return;
    }
    if (f.type === FromAgent.HELLO || (f.type === FromAgent.ERROR && f.handle === 0 && this.#onHello)) {
      const h = this.#onHello;
      this.#onHello = undefined;
      h?.(kept(f));
      return;
    }
    if (f.type === FromAgent.TUNNEL && f.payload.length >= 4) {
      this.onTunnel?.(f.payload.readUInt32LE(0));
      return;
    }
    const waiter = this.#waiting.get(f.handle);
    if (
      waiter &&
      (f.type === FromAgent.SPAWNED ||
        f.type === FromAgent.FAILED ||
        f.type === FromAgent.ERROR ||
        f.type === FromAgent.EGRESS)
    ) {
      this.#waiting.delete(f.handle);
      waiter(kept(f));
      return;
    }
    const listener = this.#listeners.get(f.handle);
    if (listener) {
      listener.frame(f);
      return;
    }
    if (f.type === FromAgent.ERROR)
      this.#log.warn({ handle: f.handle, err: f.payload.toString('utf8') }, 'exec agent reported an error');
  }

  #await(what: string, timeoutMs: number, start: (resolve: (f: AgentFrame) => void) => void): Promise<AgentFrame>;
  #await<T>(what: string, timeoutMs: number, start: (resolve: (v: T) => void) => void): Promise<T>;
  #await<T>(what: string, timeoutMs: number, start: (resolve: (v: T) => void) => void): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.#closed) {
        reject(execError('EXEC_ERR_BACKEND', `exec agent: ${this.#closeReason}`));
        return;
      }
      const timer = setTimeout(
        () =>
          reject(
            execError('EXEC_ERR_BACKEND_UNAVAILABLE', `exec agent did not answer the ${what} within ${timeoutMs} ms`),
          ),
        timeoutMs,
      );
      const onClose = (reason: string): void => {
        clearTimeout(timer);
        reject(execError('EXEC_ERR_BACKEND', `exec agent: ${reason}`));
      };
      this.#closedListeners.push(onClose);
      start((v) => {
        clearTimeout(timer);
        const i = this.#closedListeners.indexOf(onClose);
        if (i >= 0) this.#closedListeners.splice(i, 1);
        resolve(v);
      });
    });
  }

  #end(reason: string): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#closeReason = reason;
    clearTimeout(this.#laterTimer);
    this.#later = [];
    this.#socket.destroy();
    for (const l of this.#closedListeners.splice(0)) l(reason);
  }
}

/** A frame whose payload outlives the read it came in (a reply resolved later): a copy. */
function kept(f: AgentFrame): AgentFrame {
  return { ...f, payload: Buffer.from(f.payload) };
}

/**
 * The agent's connection on the server's link: one it made on its own (after a break, or to a
 * restarted server), else one it makes once `exec-agent start` (an engine exec; it starts the
 * daemon when none runs) tells it the link and the container's secret. Undefined when none comes
 * (an agent without links, a host where root in the container cannot reach the server's
 * directory): the caller then attaches through an exec, which always works.
 */
async function connectLink(o: AgentConnectOptions, link: AgentLink): Promise<Duplex | undefined> {
  const ready = link.take();
  if (ready !== undefined) return ready;
  const waiting = link.next(o.timeoutMs);
  const started = await runControl(o.container, {
    cmd: [AGENT_PATH, 'start', o.socketPath, LINK_IN_CONTAINER],
    stdin: Buffer.from(link.secretHex),
    timeoutMs: o.timeoutMs,
    maxStdout: 4096,
  }).catch((err: unknown) => ({ exitCode: -1, stderr: (err as Error).message }));
  if (started.exitCode !== 0) link.cancel();
  const socket = await waiting;
  if (socket !== undefined) return socket;
  o.log.info(
    { link: link.dir, reason: started.exitCode === 0 ? 'no connection within the timeout' : started.stderr.trim() },
    'the exec agent does not connect to its link; attaching through the engine',
  );
  return undefined;
}
