/**
 * Hibernation of a session container: `hibernate()` checkpoints it with its memory and stops
 * it (the engine keeps the checkpoint, so the memory is freed and the state survives a server
 * restart); `wake()`, or the next call that needs the container, restores it, and what ran in
 * it goes on where it was. The session is wrapped (`HibernatableSession`) so every path into
 * the container passes one gate: calls wait while a checkpoint or a restore runs, and a
 * hibernated session wakes first; memory snapshots pass it too (memory-snapshot.ts, mechanics in
 * checkpoint-restore.ts). Exec-path commands are attached execs, which no gVisor checkpoint
 * carries: refused then. See docs/docker-backend.md, "Hibernation".
 */
import type { Duplex } from 'node:stream';
import { execError } from '../../../errors.ts';
import type {
  BackendHibernation,
  BackendProcess,
  BackendSession,
  HibernationState,
  ProcessSink,
  ResolvedSandbox,
  SessionFs,
  SessionStats,
  SnapshotInfo,
  SnapshotOptions,
  SpawnRequest,
} from '../../types.ts';
import type { DockerLogger } from '../options.ts';
import { connectContainerPort } from '../container/port-forward.ts';
import { CHECKPOINT_PREFIX } from './checkpoints.ts';
import { checkpointContainer, clearAfterRestore, restoreContainer } from './checkpoint-restore.ts';
import { attachedExecsError, gatedFs, gatedProcess, InFlight } from './session-gate.ts';
import { type MemorySnapshots, restoredAdopter, takeMemorySnapshot } from './memory-snapshot.ts';
import type { HibernationInit, InnerSession } from './hibernation-types.ts';
import type { SnapshotQuota } from './snapshot-quota.ts';

/** How long a hibernation waits for calls already in the container to finish. */
const DRAIN_TIMEOUT_MS = 30_000;

/** A docker session behind the hibernation gate: checkpointed and stopped when asked, restored on use. */
export class HibernatableSession implements BackendSession, BackendHibernation {
  readonly inner: InnerSession;
  readonly runtime: string;
  readonly unsupportedReason: string | undefined;
  readonly fs: SessionFs;
  readonly hibernation: BackendHibernation = this;
  readonly adoptRestored: BackendSession['adoptRestored'];
  readonly #timeoutMs: number;
  readonly #log: DockerLogger;
  readonly #memory: MemorySnapshots | undefined;
  readonly #quota: SnapshotQuota | undefined;
  #state: HibernationState;
  #hibernatedAt: Date | undefined;
  /** The checkpoint of the current hibernation. */
  #checkpointName: string | undefined;
  /** The transition under way (hibernate or wake), which every call waits for. */
  #transition: Promise<unknown> | undefined;
  /** Calls inside the container right now (a hibernation waits until none). */
  readonly #calls = new InFlight();
  /** Processes whose attached exec is still open. */
  #running = 0;

  constructor(init: HibernationInit) {
    this.inner = init.inner;
    this.runtime = init.runtime;
    this.unsupportedReason = init.unsupportedReason;
    this.#timeoutMs = init.timeoutMs;
    this.#log = init.log;
    this.#memory = init.memory;
    this.#quota = init.quota;
    this.adoptRestored = restoredAdopter(init.restored, init.inner.agent);
    this.#hibernatedAt = init.hibernated?.at;
    this.#checkpointName = init.hibernated?.checkpoint;
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
    while (!this.#idle()) await this.#settle();
    const release = this.#calls.enter();
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

  /** The container is awake and no transition is under way. */
  #idle(): boolean {
    return this.#transition === undefined && this.#state === 'awake';
  }

  /**
   * One wait towards `#idle()`. Callers loop `while (!this.#idle()) await this.#settle();` and
   * act in the tick of the check that passed: a transition waited for can be followed at once
   * by another that was waiting too (a hibernate sent during a wake), so no wait proves it.
   */
  async #settle(): Promise<void> {
    if (this.#transition !== undefined) await this.#transition.catch(() => undefined);
    else if (this.#state === 'hibernated') await this.wake();
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
    return gatedProcess(proc, (fn) => this.#use(fn));
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
  enableEgress(port: number, accept: (conn: Duplex, offersSocket?: boolean) => void): Promise<void> {
    return this.#use(() => this.inner.enableEgress(port, accept));
  }

  /**
   * With `memory`: a live template (memory-snapshot.ts); else the filesystem, through the gate.
   * Every snapshot, a fork's too, holds a place of the tenant's quota from before anything is
   * stopped or committed until it is made or failed (snapshot-quota.ts).
   */
  async snapshot(name: string | undefined, options?: SnapshotOptions): Promise<SnapshotInfo> {
    const place = await this.#quota?.reserve(this.inner.tenant);
    try {
      const info = await (options?.memory === true
        ? takeMemorySnapshot(this.#memory, this, name)
        : this.#use(() => this.inner.snapshot(name)));
      place?.made(info.snapshotId);
      return info;
    } finally {
      await place?.release();
    }
  }

  /**
   * Checkpoints the container, runs `fn` while it is stopped (the checkpoint is `name` in the
   * engine's directory for it), then restores it: one transition, which every call waits for.
   * Resolves with `fn`'s value and how long the container was stopped.
   */
  async whileCheckpointed<T>(fn: (checkpoint: string) => Promise<T>): Promise<{ value: T; pauseMs: number }> {
    if (this.unsupportedReason !== undefined)
      throw execError('EXEC_ERR_UNSUPPORTED', `cannot checkpoint: ${this.unsupportedReason}`);
    // Not a bare wake(): the checkpoint below must start with no other transition under way.
    while (!this.#idle()) await this.#settle();
    if (this.inner.lostReason !== undefined)
      throw execError('EXEC_ERR_SESSION_DEAD', `session container is gone: ${this.inner.lostReason}`);
    return this.#run(async () => {
      this.#refuseAttachedExecs('checkpoint');
      this.#state = 'hibernating';
      await this.#drain();
      const name = `${CHECKPOINT_PREFIX}-${Date.now().toString(36)}`;
      const frozenAt = await this.#checkpoint(name);
      let value: T;
      try {
        value = await fn(name);
      } catch (err) {
        await this.#restore(name, 'awake');
        throw err;
      }
      const runningAt = await this.#restore(name, 'awake');
      this.#log.debug({ sessionId: this.id, pauseMs: runningAt - frozenAt }, 'checkpointed and restored');
      // The source's pause: its processes frozen from the checkpoint until they run again.
      return { value, pauseMs: runningAt - frozenAt };
    });
  }

  persistRecord(record: string): Promise<void> {
    return this.#use(() => this.inner.persistRecord(record));
  }

  /** Only while awake: a note never wakes the session. */
  noteActivity(): void {
    if (this.#state === 'awake') this.inner.noteActivity?.();
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
    // Another's transition failing is not this wake's failure (a failed hibernation leaves the
    // session awake): only the state after it counts.
    if (this.#transition !== undefined)
      return this.#transition.catch(() => undefined).then(() => (this.#state === 'awake' ? undefined : this.wake()));
    if (this.#state === 'awake') return Promise.resolve();
    return this.#run(() => this.#wake());
  }

  #run<T>(step: () => Promise<T>): Promise<T> {
    const t = step().finally(() => {
      if (this.#transition === t) this.#transition = undefined;
    });
    this.#transition = t;
    return t;
  }

  async #hibernate(): Promise<void> {
    this.#refuseAttachedExecs('hibernate');
    const started = Date.now();
    this.#state = 'hibernating';
    await this.#drain();
    const t0 = Date.now();
    const checkpoint = `${CHECKPOINT_PREFIX}-${Date.now().toString(36)}`;
    await this.#checkpoint(checkpoint);
    this.#checkpointName = checkpoint;
    this.#log.debug({ sessionId: this.id, drainMs: t0 - started, checkpointMs: Date.now() - t0 }, 'checkpoint taken');
    this.#state = 'hibernated';
    this.#hibernatedAt = new Date();
    this.#log.info({ sessionId: this.id, ms: Date.now() - started }, 'session hibernated');
  }

  /** On the exec path every command is an attached exec of its own, which no checkpoint carries. */
  #refuseAttachedExecs(what: string): void {
    if (this.#running > 0 && this.inner.agent === undefined)
      throw attachedExecsError(what, this.#running, this.inner.execPathReason);
  }

  /** Checkpoints and stops the container (resolves with when it froze); on failure the session is awake again (or lost). */
  async #checkpoint(name: string): Promise<number> {
    const inner = this.inner;
    try {
      return await checkpointContainer(
        {
          id: this.id,
          container: inner.container,
          agent: inner.agent,
          shellPath: inner.environment.shell.path,
          containerRunning: () => inner.containerRunning(),
          log: this.#log,
        },
        name,
        this.#timeoutMs,
      );
    } catch (err) {
      this.#state = 'awake';
      // A checkpoint that failed half-way may have stopped the container anyway.
      if ((await inner.containerRunning()) === false)
        inner.markLost(`container stopped by a failed checkpoint: ${(err as Error).message}`);
      else await this.#reattach().catch(() => undefined);
      throw err;
    }
  }

  /** Waits (bounded) until no call is inside the container; new calls already wait on the transition. */
  async #drain(): Promise<void> {
    try {
      await this.#calls.drained(DRAIN_TIMEOUT_MS);
    } catch (err) {
      this.#state = 'awake';
      throw err;
    }
  }

  async #wake(): Promise<void> {
    if (this.inner.lostReason !== undefined)
      throw execError('EXEC_ERR_SESSION_DEAD', `session container is gone: ${this.inner.lostReason}`);
    const started = Date.now();
    await this.#restore(this.#checkpointName ?? CHECKPOINT_PREFIX, 'hibernated');
    this.#hibernatedAt = undefined;
    this.#checkpointName = undefined;
    this.#log.info({ sessionId: this.id, ms: Date.now() - started }, 'session woken');
  }

  /**
   * Restores the container from `checkpoint` and resolves with when it ran again; on failure it
   * stays `failedState` (and is lost unless the engine is unreachable).
   */
  async #restore(checkpoint: string, failedState: HibernationState): Promise<number> {
    this.#state = 'waking';
    const container = this.inner.container;
    try {
      await restoreContainer(container, checkpoint, this.#log, this.id);
    } catch (err) {
      const e = err as { code?: string; message: string };
      this.#state = failedState;
      if (e.code === 'EXEC_ERR_BACKEND_UNAVAILABLE') throw err;
      this.inner.markLost(`the container could not be restored from its checkpoint: ${e.message}`);
      throw execError('EXEC_ERR_SESSION_DEAD', `session could not be woken: ${e.message}`, { cause: err });
    }
    const runningAt = Date.now();
    this.#state = 'awake';
    await clearAfterRestore(container, this.#timeoutMs, this.#log, this.id);
    await this.#reattach();
    return runningAt;
  }

  /** The agent's processes get their connection back: their output continues. */
  async #reattach(): Promise<void> {
    const agent = this.inner.agent;
    if (agent !== undefined && agent.attachedProcesses > 0) await agent.connection();
  }
}
