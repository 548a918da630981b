/**
 * A session's way to its exec agent: one connection at a time, opened on first use and again
 * after it broke. When a connection ends under running processes, the channel attaches again:
 * the processes the agent still has go on (their output replayed from where each left off),
 * the others were lost with the agent (killed, out of memory) and end `lost` with a reason
 * naming it. A container that is gone makes everything `lost` with the session's reason.
 */
import type Docker from 'dockerode';
import type { ProcessSink, SandboxType, SpawnRequest } from '../types.ts';
import { execError } from '../../errors.ts';
import { encodeSpawn, frame, FromAgent, ToAgent } from './agent-protocol.ts';
import { AgentConnection, type ListedProcess } from './agent-connection.ts';
import { AgentProcess } from './agent-process.ts';
import type { DockerLogger } from './options.ts';
import { ROOT_PID_DIR } from './scripts.ts';

/** The agent daemon's socket: on the control tmpfs, in the root-only directory. */
export const AGENT_SOCKET = `${ROOT_PID_DIR}/agent.sock`;
const AGENT_DIED = 'the exec agent died (killed, or out of memory): its processes went with it';

export interface AgentChannelInit {
  readonly container: Docker.Container;
  readonly timeoutMs: number;
  readonly retentionBytes: number;
  /** Unacknowledged output the agent may have in flight per process. */
  readonly windowBytes: number;
  readonly log: DockerLogger;
}

/** What the channel asks its session (set when a pool container is claimed). */
export interface AgentOwner {
  /** Set once the session is known dead or being destroyed. */
  lostReason(): string | undefined;
  /** Fresh look: running, stopped/gone (false), engine unreachable (undefined). */
  containerRunning(): Promise<boolean | undefined>;
}

export interface AgentSpawnOptions {
  readonly uid: number;
  readonly gid: number;
  readonly sandboxType: SandboxType;
}

export class AgentChannel {
  readonly #init: AgentChannelInit;
  #conn: AgentConnection | undefined;
  #connecting: Promise<AgentConnection> | undefined;
  readonly #procs = new Map<number, AgentProcess>();
  #nextHandle = 1;
  #closed = false;
  owner: AgentOwner = { lostReason: () => undefined, containerRunning: async () => undefined };

  constructor(init: AgentChannelInit) {
    this.#init = init;
  }

  /** The live connection, attaching (and starting the agent) when there is none. */
  connection(): Promise<AgentConnection> {
    if (this.#closed) return Promise.reject(execError('EXEC_ERR_SESSION_DEAD', this.owner.lostReason() ?? 'session is closed'));
    if (this.#conn && !this.#conn.closed) return Promise.resolve(this.#conn);
    this.#connecting ??= this.#attach().finally(() => (this.#connecting = undefined));
    return this.#connecting;
  }

  /** Attaches and lists what the agent kept; `onListed` runs before any later frame is routed. */
  async #attach(onListed?: (listed: ListedProcess[], conn: AgentConnection) => void): Promise<AgentConnection> {
    const i = this.#init;
    const conn = await AgentConnection.connect({
      container: i.container,
      socketPath: AGENT_SOCKET,
      timeoutMs: i.timeoutMs,
      retentionBytes: i.retentionBytes,
      windowBytes: i.windowBytes,
      log: i.log,
    });
    await conn.list(i.timeoutMs, (listed) => {
      for (const l of listed) this.#nextHandle = Math.max(this.#nextHandle, l.handle + 1);
      this.#rebind(listed, conn);
      onListed?.(listed, conn);
    });
    this.#conn = conn;
    conn.hold(this.#procs.size > 0);
    conn.onClose((reason) => void this.#connectionEnded(conn, reason));
    return conn;
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
    this.#init.log.warn({ reason, processes: this.#procs.size }, 'exec agent connection ended under running processes; attaching again');
    try {
      await this.connection();
    } catch (err) {
      const running = await this.owner.containerRunning();
      this.loseAll(running === false ? (this.owner.lostReason() ?? 'container is not running') : `${AGENT_DIED}; attaching again failed: ${(err as Error).message}`);
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
    const proc = new AgentProcess({ handle, mode: request.mode, sandboxType: o.sandboxType, sink, done: (p) => this.#processDone(p) });
    proc.bind(conn);
    this.#track(proc, conn);
    const reply = await conn.request(
      handle,
      encodeSpawn(handle, { ...request, uid: o.uid, gid: o.gid, tag: request.recoveryTag ?? '' }),
      this.#init.timeoutMs,
    ).catch((err: unknown) => {
      conn.unlisten(handle);
      this.#processDone(proc);
      throw err;
    });
    if (reply.type !== FromAgent.SPAWNED) {
      conn.unlisten(handle);
      this.#processDone(proc);
      const [, message] = reply.payload.toString('utf8').split('\0');
      throw execError('EXEC_ERR_BACKEND', `exec agent cannot start the command: ${message ?? reply.payload.toString('utf8')}`);
    }
    return proc;
  }

  /**
   * Server restart: what the agent kept (running or ended) for the engine to adopt. `adopt`
   * runs synchronously for each, before any later frame is routed, and returns its sink (or
   * undefined: the engine does not want it, and the agent forgets it).
   */
  async recover(adopt: (l: ListedProcess) => { sink: ProcessSink; sandboxType: SandboxType; receivedOffset: number } | undefined): Promise<number> {
    let adopted = 0;
    this.#connecting ??= this.#attach((listed, conn) => {
      for (const l of listed) {
        const a = adopt(l);
        const proc = a && new AgentProcess({ handle: l.handle, mode: l.record.mode, sandboxType: a.sandboxType, sink: a.sink, receivedOffset: a.receivedOffset, done: (p) => this.#processDone(p) });
        if (!proc) {
          conn.send(frame(ToAgent.FORGET, l.handle));
          continue;
        }
        adopted++;
        this.#track(proc, conn);
        proc.bind(conn);
        for (const o of l.output) proc.frame(outputFrame(l.handle, o));
        if (l.exit) proc.frame({ type: FromAgent.EXIT, stream: undefined, handle: l.handle, payload: l.exit });
      }
    }).finally(() => (this.#connecting = undefined));
    await this.#connecting;
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

