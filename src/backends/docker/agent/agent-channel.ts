/**
 * A session's way to its exec agent: one connection at a time, opened on first use and again
 * after it broke. When a connection ends under running processes, the channel attaches again:
 * the processes the agent still has go on (their output replayed from where each left off),
 * the others were lost with the agent (killed, out of memory) and end `lost` with a reason
 * naming it. A container that is gone makes everything `lost` with the session's reason.
 */
import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import type { BackendProcess, ProcessSink, RecoveredProcess, SandboxType, SpawnRequest } from '../../types.ts';
import { execError } from '../../../errors.ts';
import { spawnFailure } from '../../spawn-failure.ts';
import { encodeAck, encodeSpawn, frame, FromAgent, ToAgent } from './agent-protocol.ts';
import { AgentConnection, type AgentTransport, type ListedProcess } from './agent-connection.ts';
import { AgentProcess } from './agent-process.ts';
import type { AgentSocket } from './agent-links.ts';
import type { DockerLogger } from '../options.ts';
import { processStream } from '../../process-stream.ts';
import { AGENT_PATH } from './agent-connection.ts';
import { keptProcess, withMarks } from './kept-process.ts';

/** A tunnel process runs as root, unsandboxed: it only relays the socket the daemon hands it. */
const ROOT_TUNNEL: AgentSpawnOptions = { uid: 0, gid: 0, sandboxType: 'none' };
/** Tunnel processes starting at once, at most: the clients the agent keeps waiting (MAX_TUNNELS). */
const MAX_TUNNEL_STARTS = 128;

const AGENT_DIED = 'the exec agent died (killed, or out of memory): its processes went with it';

/** What a session's channel to its agent is made with: the container, its socket and link, and bounds. */
export interface AgentChannelInit {
  readonly container: Docker.Container;
  /** The daemon's socket inside the container, and the server's link for it when it has one (agent-links.ts). */
  readonly socket: AgentSocket;
  readonly timeoutMs: number;
  readonly retentionBytes: number;
  /** Unacknowledged output the agent may have in flight per process. */
  readonly windowBytes: number;
  /** Gather a terminal streaming fast on one CPU with the agent (`--pty-pin`). */
  readonly ptyPinning: boolean;
  readonly log: DockerLogger;
}

/** What the channel asks its session (set when a pool container is claimed). */
export interface AgentOwner {
  /** Set once the session is known dead or being destroyed. */
  lostReason(): string | undefined;
  /** Fresh look: running, stopped/gone (false), engine unreachable (undefined). */
  containerRunning(): Promise<boolean | undefined>;
  /**
   * Fleet: why another replica owns the session now, if it does. Such a session is not attached
   * again from here (the agent takes the newest connection: two owners would take it in turns).
   */
  movedTo?(): Promise<string | undefined>;
}

/** Acknowledgement marks ([seq, end offset], oldest first) by process handle. */
export type AckMarks = Readonly<Record<number, ReadonlyArray<readonly [number, number]>>>;

/** How the agent runs one command: as whom, in which sandbox, and the tag a restarted server needs. */
export interface AgentSpawnOptions {
  readonly uid: number;
  readonly gid: number;
  readonly sandboxType: SandboxType;
}

/** A session's way to its exec agent: one connection at a time, attached again when it breaks. */
export class AgentChannel {
  readonly #init: AgentChannelInit;
  #conn: AgentConnection | undefined;
  #connecting: Promise<AgentConnection> | undefined;
  readonly #procs = new Map<number, AgentProcess>();
  #nextHandle = 1;
  #closed = false;
  #transport: AgentTransport | undefined;
  /** The session's egress proxy port (docs/architecture.md, "Egress"): asked of every connection. */
  #egressPort: number | undefined;
  #egressAccept: ((tunnel: Duplex, offersSocket?: boolean) => void) | undefined;
  #tunnelStarts = 0;
  owner: AgentOwner = { lostReason: () => undefined, containerRunning: async () => undefined };

  constructor(init: AgentChannelInit) {
    this.#init = init;
  }

  /** How the latest connection reached the daemon (undefined before the first). */
  get transport(): AgentTransport | undefined {
    return this.#transport;
  }

  /** When the session was last noted used, as the latest connection's agent said at its hello. */
  get notedAt(): number | undefined {
    return this.#conn?.notedAt;
  }

  /** The session was used now (AgentConnection.note), on the live connection or a new one. */
  note(): void {
    if (this.#closed) return;
    void this.connection().then(
      (c) => c.note(),
      () => undefined, // no agent to tell: its session is failing, and says so on its own calls
    );
  }

  /** The live connection, attaching (and starting the agent) when there is none. */
  connection(): Promise<AgentConnection> {
    if (this.#closed)
      return Promise.reject(execError('EXEC_ERR_SESSION_DEAD', this.owner.lostReason() ?? 'session is closed'));
    if (this.#conn && !this.#conn.closed) return Promise.resolve(this.#conn);
    this.#connecting ??= this.#attach().finally(() => (this.#connecting = undefined));
    return this.#connecting;
  }

  /** Attaches and lists what the agent kept; known processes are rebound before any later frame is routed. */
  async #attach(): Promise<AgentConnection> {
    const i = this.#init;
    const moved = await this.owner.movedTo?.().catch(() => undefined);
    if (moved !== undefined) throw execError('EXEC_ERR_SESSION_DEAD', moved);
    const conn = await AgentConnection.connect({
      container: i.container,
      socketPath: i.socket.path,
      link: i.socket.link,
      timeoutMs: i.timeoutMs,
      retentionBytes: i.retentionBytes,
      windowBytes: i.windowBytes,
      ptyPinning: i.ptyPinning,
      log: i.log,
    });
    try {
      await conn.list(i.timeoutMs, (listed) => {
        for (const l of listed) this.#nextHandle = Math.max(this.#nextHandle, l.handle + 1);
        this.#rebind(listed, conn);
      });
      if (this.#egressPort !== undefined) await this.#listenEgress(conn, this.#egressPort);
    } catch (err) {
      // Not the channel's, so closed here: else it stays the agent's current connection (its
      // processes' output sent to it) with no one holding it, until another attach displaces it.
      conn.close(`attaching failed: ${(err as Error).message}`);
      throw err;
    }
    this.#conn = conn;
    this.#transport = conn.transport;
    conn.hold(this.#procs.size > 0);
    conn.onClose((reason) => void this.#connectionEnded(conn, reason));
    return conn;
  }

  /**
   * The agent listens on 127.0.0.1:`port` in the container and tunnels each client over its
   * link (native/exec-agent-egress.c); asked again of every later connection (a restarted agent).
   * Fails when the agent cannot: no link (reached through the engine), or the port taken.
   */
  async enableEgress(port: number, accept: (tunnel: Duplex, offersSocket?: boolean) => void): Promise<void> {
    const link = this.#init.socket.link;
    const before = { port: this.#egressPort, accept: this.#egressAccept, onTunnel: link?.onTunnel };
    if (link !== undefined) link.onTunnel = accept;
    this.#egressAccept = accept;
    this.#egressPort = port;
    try {
      const conn = await this.connection();
      // A connection made before the port was set was not asked yet; asking twice is harmless.
      await this.#listenEgress(conn, port);
    } catch (err) {
      // Refused, the port is not asked of later connections: each would fail the same way, and
      // the session (kept without its proxy after a restart) could never attach again.
      this.#egressPort = before.port;
      this.#egressAccept = before.accept;
      if (link !== undefined) link.onTunnel = before.onTunnel;
      throw err;
    }
  }

  async #listenEgress(conn: AgentConnection, port: number): Promise<void> {
    // Without a link the agent announces each client; a process of its own carries it.
    conn.onTunnel = (id) => void this.#tunnelProcess(id);
    // u16 port, u8 flags: 1, the proxy's relay takes client sockets (EXAGTUN2 tunnels; an agent
    // without a link, or of an older build, ignores it).
    const p = Buffer.alloc(3);
    p.writeUInt16LE(port, 0);
    p.writeUInt8(1, 2);
    const reply = await conn.request(0, frame(ToAgent.EGRESS, 0, p), this.#init.timeoutMs);
    if (reply.type !== FromAgent.EGRESS)
      throw execError('EXEC_ERR_BACKEND', `exec agent cannot run the egress proxy: ${reply.payload.toString('utf8')}`);
  }

  /**
   * Runs `exec-agent tunnel` for client `id` and hands its stdin/stdout to the proxy. The frame
   * is the agent's, which a root tenant may replace: one over a link (where tunnels come in on
   * the link itself) is ignored, and at most MAX_TUNNEL_STARTS start at once, as many as the
   * agent keeps clients waiting; a flood of frames past that starts nothing.
   */
  async #tunnelProcess(id: number): Promise<void> {
    const accept = this.#egressAccept;
    if (accept === undefined || this.#init.socket.link !== undefined) return;
    if (this.#tunnelStarts >= MAX_TUNNEL_STARTS) {
      this.#init.log.debug({ id }, 'egress tunnel ignored: as many are starting as the agent keeps waiting');
      return;
    }
    this.#tunnelStarts++;
    try {
      const stream = await processStream((request, sink) => this.spawn(request, sink, ROOT_TUNNEL), {
        argv: [AGENT_PATH, 'tunnel', this.#init.socket.path, String(id)],
        cwd: '/',
        env: {},
        mode: 'pipe',
        size: { cols: 80, rows: 24 },
        sandbox: { kind: 'unrestricted' },
      });
      accept(stream);
    } catch (err) {
      this.#init.log.debug({ id, err: (err as Error).message }, 'egress tunnel process did not start');
    } finally {
      this.#tunnelStarts--;
    }
  }

  /** After a reattach: the processes the agent still has continue, the others are lost. */
  #rebind(listed: ListedProcess[], conn: AgentConnection): void {
    const byHandle = new Map(listed.map((l) => [l.handle, l]));
    for (const proc of [...this.#procs.values()]) {
      const l = byHandle.get(proc.handle);
      if (!l) {
        proc.lose(AGENT_DIED);
        continue;
      }
      proc.bind(conn);
      for (const o of l.output) proc.frame(outputFrame(proc.handle, o));
      if (l.exit) proc.frame({ type: FromAgent.EXIT, stream: undefined, handle: proc.handle, payload: l.exit });
    }
  }

  async #connectionEnded(conn: AgentConnection, reason: string): Promise<void> {
    if (this.#conn !== conn) return;
    this.#conn = undefined;
    if (this.#procs.size === 0 || this.#closed) return;
    const lost = this.owner.lostReason();
    if (lost !== undefined) return this.loseAll(lost);
    this.#init.log.warn(
      { reason, processes: this.#procs.size },
      'exec agent connection ended under running processes; attaching again',
    );
    try {
      await this.connection();
    } catch (err) {
      const running = await this.owner.containerRunning();
      this.loseAll(
        running === false
          ? (this.owner.lostReason() ?? 'container is not running')
          : `${AGENT_DIED}; attaching again failed: ${(err as Error).message}`,
      );
    }
  }

  /** A process is done with the agent: forget it; an idle connection stops holding the loop. */
  #processDone(p: AgentProcess): void {
    this.#procs.delete(p.handle);
    if (this.#procs.size === 0) this.#conn?.hold(false);
  }

  #track(proc: AgentProcess, conn: AgentConnection): void {
    this.#procs.set(proc.handle, proc);
    conn.hold(true);
  }

  async spawn(request: SpawnRequest, sink: ProcessSink, o: AgentSpawnOptions): Promise<AgentProcess> {
    const conn = await this.connection();
    const handle = this.#nextHandle++;
    const proc = new AgentProcess({
      handle,
      mode: request.mode,
      sandboxType: o.sandboxType,
      sink,
      done: (p) => this.#processDone(p),
    });
    proc.bind(conn);
    this.#track(proc, conn);
    const reply = await conn
      .request(
        handle,
        encodeSpawn(handle, {
          ...request,
          uid: o.uid,
          gid: o.gid,
          tag: `${o.sandboxType}\n${request.recoveryTag ?? ''}`,
        }),
        this.#init.timeoutMs,
      )
      .catch((err: unknown) => {
        conn.unlisten(handle);
        this.#processDone(proc);
        throw err;
      });
    if (reply.type !== FromAgent.SPAWNED) {
      conn.unlisten(handle);
      this.#processDone(proc);
      const [why = '', message] = reply.payload.toString('utf8').split('\0');
      // The agent's child could not enter the directory or run the program.
      if (why.startsWith('spawn:') && message !== undefined) {
        const at = message.lastIndexOf(': ');
        throw spawnFailure(message.slice(0, at), Number(why.slice(6)), message.slice(at + 2));
      }
      throw execError(
        'EXEC_ERR_BACKEND',
        `exec agent cannot start the command: ${message ?? reply.payload.toString('utf8')}`,
      );
    }
    return proc;
  }

  /**
   * Server restart: hands every process the agent kept (running or ended) to `adopt`, which
   * runs synchronously for each, before any later frame is routed, and returns the sink the
   * process reports to from now on (or undefined: the agent kills and forgets it). `marks`: per
   * handle, acknowledgements the agent never read (a fork: the source's `unsentMarks` at its
   * checkpoint), so output the source published keeps its seqs.
   */
  async recover(
    adopt: (p: RecoveredProcess, process: BackendProcess) => ProcessSink | undefined,
    marks?: AckMarks,
  ): Promise<number> {
    let adopted = 0;
    const conn = await this.connection();
    // Listed again on the live connection: what arrived before anyone listened is replayed.
    await conn.list(this.#init.timeoutMs, (listed) => {
      for (const l of listed) {
        if (this.#procs.has(l.handle)) continue;
        this.#nextHandle = Math.max(this.#nextHandle, l.handle + 1);
        const kept = keptProcess(withMarks(l, marks?.[l.handle]));
        let target: ProcessSink | undefined;
        const proc = new AgentProcess({
          handle: l.handle,
          mode: l.record.mode,
          sandboxType: kept.sandboxType,
          sink: { output: (stream, data) => target?.output(stream, data), exit: (e) => target?.exit(e) },
          receivedOffset: kept.endOffset,
          done: (p) => this.#processDone(p),
        });
        this.#track(proc, conn);
        proc.bind(conn);
        target = adopt(kept, proc);
        // The fork's agent learns them too (a later restart of this server rebuilds the same seqs).
        const extra = marks?.[l.handle];
        if (target && extra !== undefined && extra.length > 0) conn.send(encodeAck(l.handle, extra));
        if (!target) {
          conn.send(frame(ToAgent.FORGET, l.handle));
          proc.lose('not adopted');
          continue;
        }
        adopted++;
        if (l.exit) proc.frame({ type: FromAgent.EXIT, stream: undefined, handle: l.handle, payload: l.exit });
      }
    });
    return adopted;
  }

  /** Hibernation: lets the connection go with the processes running; the next use attaches again. */
  async detach(): Promise<void> {
    const conn = this.#conn;
    if (!conn || conn.closed) return;
    this.#conn = undefined; // not an accident: no reattach on this close
    await new Promise<void>((resolve) => {
      conn.onClose(() => resolve());
      conn.detach();
    });
    // Running processes stay in #procs: the next use attaches again and rebinds them.
  }

  /**
   * Per process handle, the acknowledgement marks its agent never read (published after a
   * detach): a fork of a checkpoint taken now gets them from the server (`recover`'s `marks`).
   */
  unsentMarks(): AckMarks {
    const out: Record<number, ReadonlyArray<readonly [number, number]>> = {};
    for (const p of this.#procs.values()) if (p.unsentMarks.length > 0) out[p.handle] = [...p.unsentMarks];
    return out;
  }

  get attachedProcesses(): number {
    return this.#procs.size;
  }

  loseAll(reason: string): void {
    for (const p of [...this.#procs.values()]) p.lose(reason);
    this.#procs.clear();
  }

  close(reason: string): void {
    this.#closed = true;
    this.loseAll(reason);
    const conn = this.#conn;
    this.#conn = undefined;
    conn?.close(reason);
  }
}

function outputFrame(handle: number, o: ListedProcess['output'][number]): Parameters<AgentProcess['frame']>[0] {
  const payload = Buffer.allocUnsafe(8 + o.data.length);
  payload.writeBigUInt64LE(BigInt(o.offset), 0);
  o.data.copy(payload, 8);
  return { type: FromAgent.OUTPUT, stream: o.stream, handle, payload };
}
