/**
 * Hibernation of a session container: `hibernate()` checkpoints it with its memory and stops
 * it (the engine keeps the checkpoint, so the memory is freed and the state survives a server
 * restart); `wake()`, or the next call that needs the container, restores it, and what ran in
 * it goes on where it was. The session is wrapped (`HibernatableSession`) so every path into
 * the container passes one gate: calls wait while a checkpoint or a restore runs, and a
 * hibernated session wakes first. See docs/docker-backend.md, "Hibernation".
 *
 * gVisor cannot restore a checkpoint taken while an attached exec is open (its restore of the
 * memory mappings panics; detached work, the container's main process and finished execs are
 * fine). On the agent path the agent's connection is the only attached exec: it is let go
 * before the checkpoint (the agent keeps the processes and their output) and attached again
 * after the restore, so running commands go on and their output continues. On the exec path
 * every command is an attached exec of its own: the session refuses to hibernate while one runs.
 */
import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import type {
  BackendHibernation,
  BackendProcess,
  BackendSession,
  HibernationState,
  ProcessSink,
  RecoveredProcess,
  ResolvedSandbox,
  SessionFs,
  SessionStats,
  SnapshotInfo,
  SpawnRequest,
} from '../../types.ts';
import { withDeadline } from '../engine/engine-client.ts';
import { runControl } from '../exec/exec-runner.ts';
import type { AgentChannel } from '../agent/agent-channel.ts';
import type { DockerLogger } from '../options.ts';
import { connectContainerPort } from '../container/port-forward.ts';
import { RECORD_FILE } from '../exec/scripts.ts';
import { CHECKPOINT_PREFIX, type CheckpointApi, deleteCheckpoints, HIBERNATION_FILE } from './checkpoints.ts';

/** Checkpoint and restore of a large container take seconds; a dead engine still fails at once. */
const CHECKPOINT_TIMEOUT_MS = 120_000;

/** How long the engine may take to record the stop after a checkpoint answered. */
const STOP_WAIT_MS = 15_000;

/** How long a hibernation waits for calls already in the container to finish. */
const DRAIN_TIMEOUT_MS = 30_000;

/** Writes the hibernation file (see `HIBERNATION_FILE`). Args: file, record file, shell, exec path. */
const SAVE_SCRIPT =
  'umask 077 && mkdir -p "$(dirname "$1")" && { printf "%s\\n%s\\n" "$3" "$4"; cat "$2" 2>/dev/null || :; } >"$1.tmp" && mv "$1.tmp" "$1"';

/** The session being wrapped: the docker session's own surface plus what hibernation needs. */
export type InnerSession = BackendSession & {
  readonly container: Docker.Container;
  readonly lostReason: string | undefined;
  /** The exec agent on the agent path; its connection must not span a checkpoint. */
  readonly agent: AgentChannel | undefined;
  readonly execPathReason?: string | undefined;
  markLost(reason: string): void;
  enableEgress(port: number, accept: (conn: Duplex) => void): Promise<void>;
  stats(): Promise<SessionStats>;
  prepareSandbox(sandbox: ResolvedSandbox): Promise<void>;
  containerRunning(): Promise<boolean | undefined>;
  killAll(): Promise<void>;
  recoverExecProcesses(
    adopt: (p: RecoveredProcess, process: BackendProcess) => ProcessSink | undefined,
  ): Promise<number>;
};

export interface HibernationInit {
  readonly inner: InnerSession;
  readonly runtime: string;
  /** Why this runtime cannot checkpoint here, or undefined. */
  readonly unsupportedReason: string | undefined;
  readonly timeoutMs: number;
  readonly log: DockerLogger;
  /** Re-adopted while hibernated (server restart): since when, and the checkpoint to wake from. */
  readonly hibernated?: { readonly at: Date; readonly checkpoint: string } | undefined;
}

export class HibernatableSession implements BackendSession, BackendHibernation {
  readonly inner: InnerSession;
  readonly runtime: string;
  readonly unsupportedReason: string | undefined;
  readonly fs: SessionFs;
  readonly hibernation: BackendHibernation = this;
  readonly #timeoutMs: number;
  readonly #log: DockerLogger;
  #state: HibernationState;
  #hibernatedAt: Date | undefined;
  /** The checkpoint of the current hibernation. */
  #checkpoint: string | undefined;
  /** The transition under way (hibernate or wake), which every call waits for. */
  #transition: Promise<void> | undefined;
  /** Calls inside the container right now (a hibernation waits until none). */
  #inFlight = 0;
  #drained: (() => void) | undefined;
  /** Processes whose attached exec is still open. */
  #running = 0;

  constructor(init: HibernationInit) {
    this.inner = init.inner;
    this.runtime = init.runtime;
    this.unsupportedReason = init.unsupportedReason;
    this.#timeoutMs = init.timeoutMs;
    this.#log = init.log;
    this.#hibernatedAt = init.hibernated?.at;
    this.#checkpoint = init.hibernated?.checkpoint;
    this.#state = init.hibernated === undefined ? 'awake' : 'hibernated';
    this.fs = gatedFs(init.inner.fs, (fn, hold) => this.#use(fn, hold));
  }

  get id(): BackendSession['id'] {
    return this.inner.id;
  }
  get workdir(): string {
    return this.inner.workdir;
  }
  get containerId(): BackendSession['containerId'] {
    return this.inner.containerId;
  }
  get image(): string | undefined {
    return this.inner.image;
  }
  get sandboxType(): BackendSession['sandboxType'] {
    return this.inner.sandboxType;
  }
  get sandboxUnavailableReason(): string | undefined {
    return this.inner.sandboxUnavailableReason;
  }
  get environment(): BackendSession['environment'] {
    return this.inner.environment;
  }
  get execPath(): BackendSession['execPath'] {
    return this.inner.execPath;
  }
  get agentTransport(): BackendSession['agentTransport'] {
    return this.inner.agentTransport;
  }
  get execPathReason(): string | undefined {
    return this.inner.execPathReason;
  }
  get state(): HibernationState {
    return this.#state;
  }
  get hibernatedAt(): Date | undefined {
    return this.#hibernatedAt;
  }
  /** True while the container is stopped or stopping on purpose (its `die` event is not a loss). */
  get expectsStop(): boolean {
    return this.#state !== 'awake';
  }

  /**
   * Runs `fn` with the container awake, counted so a hibernation waits for it; `hold` keeps it
   * counted past the return (a stream still reading from the container).
   */
  async #use<T>(fn: () => Promise<T>, hold?: (value: T) => Promise<void>): Promise<T> {
    while (this.#transition !== undefined || this.#state !== 'awake') {
      if (this.#transition !== undefined) await this.#transition.catch(() => undefined);
      else if (this.#state === 'hibernated') await this.wake();
    }
    this.#inFlight++;
    const release = (): void => {
      this.#inFlight--;
      if (this.#inFlight === 0) this.#drained?.();
    };
    let value: T;
    try {
      value = await fn();
    } catch (err) {
      release();
      throw err;
    }
    if (hold === undefined) release();
    else void hold(value).finally(release);
    return value;
  }

  async spawn(request: SpawnRequest, sink: ProcessSink): Promise<BackendProcess> {
    let open = true;
    const done = (): void => {
      if (open) {
        open = false;
        this.#running--;
      }
    };
    const counted: ProcessSink = {
      output: (stream, data) => sink.output(stream, data),
      exit: (result) => {
        done();
        sink.exit(result);
      },
    };
    this.#running++;
    let proc: BackendProcess;
    try {
      proc = await this.#use(() => this.inner.spawn(request, counted));
    } catch (err) {
      done();
      throw err;
    }
    // Input, resizes and signals need the container (and the agent's connection): they wake it.
    // Everything else goes straight through (acknowledgements are kept by the process itself).
    const acknowledge = proc.acknowledge?.bind(proc);
    const dispose = proc.dispose?.bind(proc);
    return {
      get sandboxType() {
        return proc.sandboxType;
      },
      write: (data) => this.#use(() => proc.write(data)),
      closeStdin: () => this.#use(() => proc.closeStdin()),
      resize: (size) => this.#use(() => proc.resize(size)),
      signal: (signal) => this.#use(() => proc.signal(signal)),
      pauseOutput: () => proc.pauseOutput(),
      resumeOutput: () => proc.resumeOutput(),
      ...(acknowledge !== undefined ? { acknowledge } : {}),
      ...(dispose !== undefined ? { dispose } : {}),
    };
  }

  /** Resource use goes straight through: a console polling it must not wake the container (stopped, it reports nothing running). */
  stats(): Promise<SessionStats> {
    return this.inner.stats();
  }

  /** Prepared ahead only while awake: a hibernated session prepares it at its next start. */
  async prepareSandbox(sandbox: ResolvedSandbox): Promise<void> {
    if (this.#state === 'awake' && this.#transition === undefined)
      await this.#use(() => this.inner.prepareSandbox(sandbox));
  }

  aliasPath(path: string): Promise<boolean> {
    return this.#use(async () => (await this.inner.aliasPath?.(path)) ?? false);
  }

  /** Preview ports: the relay is one of this session's processes, so it wakes the container and keeps it awake while open. */
  connectPort(port: number): Promise<Duplex> {
    return connectContainerPort((request, sink) => this.spawn(request, sink), this.inner.workdir, port);
  }

  /** Egress: asked of the agent now, and of every later connection to it (after a wake too). */
  enableEgress(port: number, accept: (conn: Duplex) => void): Promise<void> {
    return this.#use(() => this.inner.enableEgress(port, accept));
  }

  snapshot(name: string | undefined): Promise<SnapshotInfo> {
    return this.#use(() => this.inner.snapshot(name));
  }

  persistRecord(record: string): Promise<void> {
    return this.#use(() => this.inner.persistRecord(record));
  }

  onLost(listener: (reason: string) => void): void {
    this.inner.onLost(listener);
  }

  /** A hibernated session's processes are in its checkpoint: it wakes so they can be ended. */
  killAll(): Promise<void> {
    return this.#use(() => this.inner.killAll());
  }

  /** Removing the container needs no wake: a hibernated one goes with its checkpoint. */
  async destroy(): Promise<void> {
    await this.#transition?.catch(() => undefined);
    await this.inner.destroy();
  }

  hibernate(): Promise<void> {
    if (this.unsupportedReason !== undefined)
      return Promise.reject(execError('EXEC_ERR_UNSUPPORTED', `cannot hibernate: ${this.unsupportedReason}`));
    if (this.inner.lostReason !== undefined)
      return Promise.reject(execError('EXEC_ERR_SESSION_DEAD', `session container is gone: ${this.inner.lostReason}`));
    if (this.#transition !== undefined)
      return this.#transition.then(() => (this.#state === 'hibernated' ? undefined : this.hibernate()));
    if (this.#state === 'hibernated') return Promise.resolve();
    return this.#run(() => this.#hibernate());
  }

  wake(): Promise<void> {
    if (this.#transition !== undefined)
      return this.#transition.then(() => (this.#state === 'awake' ? undefined : this.wake()));
    if (this.#state === 'awake') return Promise.resolve();
    return this.#run(() => this.#wake());
  }

  #run(step: () => Promise<void>): Promise<void> {
    const t = step().finally(() => {
      if (this.#transition === t) this.#transition = undefined;
    });
    this.#transition = t;
    return t;
  }

  async #hibernate(): Promise<void> {
    const agent = this.inner.agent;
    if (this.#running > 0 && agent === undefined) {
      throw execError(
        'EXEC_ERR_BUSY',
        `cannot hibernate: ${this.#running} process(es) still running through attached engine execs (this session has no exec agent: ${this.inner.execPathReason ?? 'exec path'}), which a gVisor checkpoint cannot carry (its restore fails); let them end or terminate them first`,
      );
    }
    const started = Date.now();
    this.#state = 'hibernating';
    try {
      await this.#drain();
      const container = this.inner.container;
      const saved = await runControl(container, {
        cmd: [
          '/bin/sh',
          '-c',
          SAVE_SCRIPT,
          'sh',
          HIBERNATION_FILE,
          RECORD_FILE,
          this.inner.environment.shell.path,
          agent === undefined ? 'exec' : `agent ${agent.attachedProcesses}`,
        ],
        timeoutMs: this.#timeoutMs,
      });
      if (saved.exitCode !== 0)
        throw execError(
          'EXEC_ERR_BACKEND',
          `cannot hibernate: saving the session facts failed: ${saved.stderr.trim()}`,
        );
      // Checkpoints of earlier hibernations (a wake that could not delete its own) go first.
      await deleteCheckpoints(container, this.#timeoutMs).catch(() => undefined);
      // Last: the agent's connection (an attached exec) goes; its processes stay with the agent.
      await agent?.detach();
      const t0 = Date.now();
      const checkpoint = `${CHECKPOINT_PREFIX}-${Date.now().toString(36)}`;
      await withDeadline('container checkpoint', CHECKPOINT_TIMEOUT_MS, (abortSignal) =>
        (container as unknown as CheckpointApi).createCheckpoint({ CheckpointID: checkpoint, Exit: true, abortSignal }),
      );
      this.#checkpoint = checkpoint;
      // The engine answers before it has recorded the stop; a restore before that is refused.
      await this.#waitStopped();
      this.#log.debug({ sessionId: this.id, drainMs: t0 - started, checkpointMs: Date.now() - t0 }, 'checkpoint taken');
    } catch (err) {
      this.#state = 'awake';
      // A checkpoint that failed half-way may have stopped the container anyway.
      if ((await this.inner.containerRunning()) === false)
        this.inner.markLost(`container stopped by a failed checkpoint: ${(err as Error).message}`);
      else await this.#reattach().catch(() => undefined);
      throw err;
    }
    this.#state = 'hibernated';
    this.#hibernatedAt = new Date();
    this.#log.info({ sessionId: this.id, ms: Date.now() - started }, 'session hibernated');
  }

  async #waitStopped(): Promise<void> {
    const deadline = Date.now() + STOP_WAIT_MS;
    for (;;) {
      const running = await this.inner.containerRunning();
      if (running === false) return;
      if (Date.now() >= deadline)
        throw execError(
          'EXEC_ERR_BACKEND',
          `cannot hibernate: the checkpoint was taken but the container still runs after ${STOP_WAIT_MS} ms`,
        );
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** Waits (bounded) until no call is inside the container; new calls already wait on the transition. */
  async #drain(): Promise<void> {
    if (this.#inFlight === 0) return;
    let timer: NodeJS.Timeout | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        this.#drained = resolve;
        timer = setTimeout(
          () =>
            reject(
              execError(
                'EXEC_ERR_BUSY',
                `cannot hibernate: ${this.#inFlight} call(s) into the container did not finish within ${DRAIN_TIMEOUT_MS} ms`,
              ),
            ),
          DRAIN_TIMEOUT_MS,
        );
      });
    } finally {
      clearTimeout(timer);
      this.#drained = undefined;
    }
  }

  async #wake(): Promise<void> {
    if (this.inner.lostReason !== undefined)
      throw execError('EXEC_ERR_SESSION_DEAD', `session container is gone: ${this.inner.lostReason}`);
    const started = Date.now();
    this.#state = 'waking';
    const container = this.inner.container;
    const checkpoint = this.#checkpoint ?? CHECKPOINT_PREFIX;
    try {
      // The engine refuses a start with a body: the checkpoint goes in the query only. Two
      // failures pass, so a few tries, bounded: right after a checkpoint the runtime may still
      // hold the sandbox's id; and a restore whose sandbox failed to resume is retried by the
      // engine, whose second upload of the checkpoint then meets the first one in containerd
      // ("... already exists") until the failed start has removed it.
      for (let attempt = 1; ; attempt++) {
        try {
          await withDeadline('container restore', CHECKPOINT_TIMEOUT_MS, (abortSignal) =>
            container.start({ _query: { checkpoint }, _body: {}, abortSignal } as object),
          );
          break;
        } catch (err) {
          const message = (err as Error).message;
          const idInUse = /id already in use/.test(message);
          if (!idInUse && !/upload checkpoint to containerd: .*already exists/.test(message)) throw err;
          if (attempt >= 5) {
            if (!idInUse) throw err;
            throw execError(
              'EXEC_ERR_BACKEND',
              `${message}: the runtime kept the container's id after its checkpoint (runsc 2022-12 does so for a container that was itself restored; register it through scripts/runsc-runtime.sh, docs/docker-backend.md)`,
              { cause: err },
            );
          }
          this.#log.debug({ sessionId: this.id, attempt, err: message }, 'restore refused; trying again');
          await new Promise((r) => setTimeout(r, 500 * attempt));
        }
      }
    } catch (err) {
      const e = err as { code?: string; message: string };
      if (e.code === 'EXEC_ERR_BACKEND_UNAVAILABLE') {
        this.#state = 'hibernated';
        throw err;
      }
      this.#state = 'hibernated';
      this.inner.markLost(`the container could not be restored from its checkpoint: ${e.message}`);
      throw execError('EXEC_ERR_SESSION_DEAD', `session could not be woken: ${e.message}`, { cause: err });
    }
    this.#state = 'awake';
    this.#hibernatedAt = undefined;
    this.#checkpoint = undefined;
    await deleteCheckpoints(container, this.#timeoutMs).catch((err: unknown) =>
      this.#log.warn({ sessionId: this.id, err: (err as Error).message }, 'checkpoint not deleted after wake'),
    );
    await runControl(container, {
      cmd: ['rm', '-rf', '--', HIBERNATION_FILE.slice(0, HIBERNATION_FILE.lastIndexOf('/'))],
      timeoutMs: this.#timeoutMs,
    }).catch(() => undefined);
    await this.#reattach();
    this.#log.info({ sessionId: this.id, ms: Date.now() - started }, 'session woken');
  }

  /** Processes kept by the agent get their connection back: their output continues. */
  async #reattach(): Promise<void> {
    const agent = this.inner.agent;
    if (agent !== undefined && agent.attachedProcesses > 0) await agent.connection();
  }
}

/** The session's filesystem with every call behind the hibernation gate. */
type Gate = <T>(fn: () => Promise<T>, hold?: (value: T) => Promise<void>) => Promise<T>;

function gatedFs(fs: SessionFs, use: Gate): SessionFs {
  return {
    realpath: (p) => use(() => fs.realpath(p)),
    stat: (p) => use(() => fs.stat(p)),
    readFile: (p, max) => use(() => fs.readFile(p, max)),
    // The read's exec stays open until the stream ends: the gate counts it until then.
    openRead: (p, offset) => use(() => fs.openRead(p, offset), streamEnded),
    writeFile: (p, data) => use(() => fs.writeFile(p, data)),
    writeStream: (p, source) => use(() => fs.writeStream(p, source)),
    createDirectory: (p, r) => use(() => fs.createDirectory(p, r)),
    readDirectory: (p) => use(() => fs.readDirectory(p)),
    remove: (p, r, f) => use(() => fs.remove(p, r, f)),
    copy: (s, d, r) => use(() => fs.copy(s, d, r)),
  };
}

/** Resolves when a stream handed to a caller is over, however it ends. */
function streamEnded(stream: NodeJS.ReadableStream): Promise<void> {
  return new Promise<void>((resolve) => {
    const s = stream as NodeJS.ReadableStream & { readableEnded?: boolean; destroyed?: boolean };
    if (s.readableEnded === true || s.destroyed === true) return resolve();
    s.once('end', () => resolve());
    s.once('close', () => resolve());
    s.once('error', () => resolve());
  });
}
