/**
 * `ExecServerClient`: one session over WebSocket JSON-RPC (processes, approvals, resume) plus
 * the REST API for sessions (`client.http`).
 *
 *   const client = await ExecServerClient.connect('ws://127.0.0.1:8765', { token });
 *   const proc = await client.exec(['bash', '-c', 'echo hi']);
 *   const { stdout } = await proc.wait();
 *
 * The session's files are `client.files` (whole files over JSON-RPC, streams over HTTP).
 *
 * A dropped connection can be resumed (`reconnect()`, or automatically with `autoReconnect`):
 * the session's processes kept running on the server, and every open handle fills its gap
 * from its last seq with `process/read`, so each byte arrives once, in order; what the server
 * no longer retained is counted in the result's `droppedBytes`. When the connection is gone for
 * good, pending `wait()`s reject with `ExecServerConnectionError`.
 */
import { randomUUID } from 'node:crypto';
import { asProcessId, asSessionId, type ProcessId, type SessionId } from '../ids.ts';
import type {
  CreateSessionToken,
  SessionToken,
  InitializeResult,
  MethodName,
  MethodParams,
  MethodResult,
  ProcessSummary,
  SessionInfo,
  SnapshotInfo,
} from '../protocol/index.ts';
import { type ConnectOptions, openSession } from './connect.ts';
import { ExecServerConnectionError, StdinClosedError } from './errors.ts';
import { SessionFiles } from './files.ts';
import { HttpApi, wsUrlOf } from './http.ts';
import { ExecHandle, type ProcessEvent } from './process-handle.ts';
import { RpcError, type RpcConnection, type Notification } from './rpc-connection.ts';

function isProcessNotification(n: Notification): n is ProcessEvent {
  return n.method.startsWith('process/');
}

export type { ApprovalDecision, ApprovalRequest, ImagePull, ProcessSummary } from '../protocol/index.ts';
export { type ConnectOptions, DEFAULT_CONNECT_TIMEOUT_MS } from './connect.ts';

/** Close code of an evicted connection: the session was resumed elsewhere or deleted (docs/protocol.md). */
const EVICTED_CLOSE_CODE = 4000;

/** A handle whose catch-up found its process gone from the server (pruned, or lost with its backend). */
function isProcessNotFound(err: unknown): boolean {
  return err instanceof RpcError && err.code === 'EXEC_ERR_PROCESS_NOT_FOUND';
}

/** Close code of a server draining for a rollout (docs/protocol.md). */
export const DRAIN_CLOSE_CODE = 1012;

interface ReconnectPlan {
  readonly attempts?: number | undefined;
  readonly delayMs?: number | undefined;
  readonly maxDelayMs?: number | undefined;
}

/** How `ExecServerClient.exec` starts a command: `process/start`'s options in the SDK's terms. */
export interface ExecOptions {
  readonly tty?: boolean | undefined;
  readonly cwd?: string | undefined;
  readonly env?: Record<string, string> | undefined;
  /** Data written to stdin and then closed, or `'pipe'` to keep stdin open for `sendStdin`. */
  readonly stdin?: string | Uint8Array | 'pipe' | undefined;
  readonly size?: { readonly cols: number; readonly rows: number } | undefined;
  readonly timeoutMs?: number | undefined;
  /** `wait()` throws `CommandExitError` on a non-zero exit (default true). */
  readonly check?: boolean | undefined;
  /** Keep the decoded output for `wait()` (default true; turn off for endless streams). */
  readonly collect?: boolean | undefined;
  readonly processId?: string | undefined;
  readonly sandboxPermissions?: 'use-default' | 'require-escalated' | undefined;
  readonly approval?: 'approved' | 'approved-for-session' | undefined;
}

/** One session over WebSocket JSON-RPC plus the REST API; made with `ExecServerClient.connect`. */
export class ExecServerClient {
  readonly url: string;
  readonly sessionId: SessionId;
  readonly http: HttpApi;
  /** The session's files: `readFile`, `writeFile`, `upload`, `download`, `list`, `stat`, `mkdir`, `remove`... */
  readonly files: SessionFiles;
  /** The `initialize` result (capabilities, environmentInfo). */
  initResult: InitializeResult;
  #conn: RpcConnection;
  readonly #opts: ConnectOptions;
  readonly #handles = new Map<ProcessId, ExecHandle>();
  readonly #disconnectListeners = new Set<(info: { code: number; reason: string }) => void>();
  #closing = false;
  #reconnecting: Promise<void> | undefined;
  /** Set by `server/draining`: the close that follows is a rollout's. */
  #drainRetryMs: number | undefined;

  private constructor(url: string, conn: RpcConnection, init: InitializeResult, opts: ConnectOptions) {
    this.url = url;
    this.#conn = conn;
    this.initResult = init;
    this.sessionId = asSessionId(init.sessionId);
    this.#opts = opts;
    this.http = new HttpApi(url, opts.token);
    this.files = new SessionFiles({ baseUrl: url, token: opts.token, sessionId: this.sessionId }, this);
    this.#bind(conn);
  }

  /** Opens a connection and initializes a new (or resumed) session. */
  static async connect(url: string, opts: ConnectOptions = {}): Promise<ExecServerClient> {
    const { conn, init } = await openSession(wsUrlOf(url), opts, opts.resumeSessionId);
    return new ExecServerClient(wsUrlOf(url), conn, init, opts);
  }

  #bind(conn: RpcConnection, early: Notification[] = []): void {
    const route = (n: Notification): void => {
      if (isProcessNotification(n)) this.#handles.get(asProcessId(n.params.processId))?._notify(n);
      else if (n.method === 'server/draining' && conn === this.#conn) {
        this.#drainRetryMs = n.params.retryAfterMs;
        this.#opts.onDraining?.(n.params);
      }
    };
    for (const n of early) route(n);
    conn.onNotification(route);
    conn.onClose((code, reason) => {
      if (conn !== this.#conn) return;
      for (const l of this.#disconnectListeners) l({ code, reason });
      const plan = this.#reconnectPlan(code);
      this.#drainRetryMs = undefined;
      if (plan) void this.#autoReconnect(plan, conn);
      else this.#giveUp(code, reason);
    });
  }

  /**
   * The connection is gone and nothing resumes it: every open handle's `wait()` rejects
   * instead of waiting for events that cannot come (a later `reconnect()` resumes them).
   */
  #giveUp(code: number | undefined, reason = ''): void {
    const why =
      code === EVICTED_CLOSE_CODE
        ? `evicted (${reason || 'the session was resumed by another connection, or deleted'})`
        : this.#closing
          ? 'disconnected'
          : `connection closed (${code ?? 'never reopened'}${reason ? ` ${reason}` : ''})`;
    const err = new ExecServerConnectionError(`${why}: session ${this.sessionId} has no connection`);
    for (const h of this.#handles.values()) h._fail(err);
  }

  /** Whether (and how) to resume after a close with `code`: a drain (rollout), or `autoReconnect`. */
  #reconnectPlan(code: number): ReconnectPlan | undefined {
    if (this.#closing || code === EVICTED_CLOSE_CODE) return undefined;
    const drained = code === DRAIN_CLOSE_CODE || this.#drainRetryMs !== undefined;
    // A rollout: the next server may take a while to come up (about a minute at most).
    if (drained && this.#opts.reconnectOnDrain !== false)
      return { attempts: 60, delayMs: Math.max(this.#drainRetryMs ?? 500, 100), maxDelayMs: 2000 };
    const auto = this.#opts.autoReconnect;
    return auto ? (auto === true ? {} : auto) : undefined;
  }

  /**
   * Resumes after `from` closed, retrying; gives up when the attempts ran out or `disconnect()`
   * was called. A resume that got a newer connection leaves the rest to that one's close.
   */
  async #autoReconnect(opts: ReconnectPlan, from: RpcConnection): Promise<void> {
    const attempts = opts.attempts ?? 10;
    for (let i = 0; i < attempts && !this.#closing && this.#conn === from; i++) {
      const delay = (opts.delayMs ?? 200) * (i + 1);
      await new Promise((r) => setTimeout(r, Math.min(delay, opts.maxDelayMs ?? delay)));
      if (this.#closing) break;
      try {
        await this.#resume();
        return;
      } catch {
        // try again
      }
    }
    if (this.#conn === from) this.#giveUp(from.closeCode, from.closeReason);
  }

  /** The connection closed (evicted, dropped, or after `disconnect()`). */
  onDisconnect(cb: (info: { code: number; reason: string }) => void): () => void {
    this.#disconnectListeners.add(cb);
    return () => this.#disconnectListeners.delete(cb);
  }

  get connected(): boolean {
    return this.#conn.closeCode === undefined && this.#conn.socket.readyState === this.#conn.socket.OPEN;
  }

  /** A JSON-RPC request on the session (e.g. `session/info`, `fs/readFile`), typed by the protocol. */
  request<M extends MethodName>(method: M, params: MethodParams<M>): Promise<MethodResult<M>>;
  /** Any method (an extension this SDK does not know yet): the answer typed as the caller says. */
  request<T = Record<string, unknown>>(method: string, params?: unknown): Promise<T>;
  request(method: string, params?: unknown): Promise<unknown> {
    return this.#conn.request(method, params);
  }

  /** Starts a process; the handle streams its output and ends with `wait()`. */
  async exec(argv: readonly string[], opts: ExecOptions = {}): Promise<ExecHandle> {
    const processId = asProcessId(opts.processId ?? `sdk-${randomUUID()}`);
    const handle: ExecHandle = new ExecHandle(processId, argv, () => this, {
      check: opts.check,
      collect: opts.collect,
      release: () => this.#unregister(handle),
    });
    // Registered before the start so no early notification is missed, unless that would cut
    // off a live handle of the same id (the server refuses the start then, almost always).
    const live = this.#handles.get(processId);
    if (live) handle._hold();
    else this.#register(handle);
    const stdinData = opts.stdin !== undefined && opts.stdin !== 'pipe' ? opts.stdin : undefined;
    try {
      await this.request('process/start', {
        processId,
        argv,
        tty: opts.tty === true,
        pipeStdin: opts.tty !== true && opts.stdin !== undefined,
        ...(opts.cwd !== undefined ? { cwd: opts.cwd } : {}),
        ...(opts.env !== undefined ? { env: opts.env } : {}),
        ...(opts.size !== undefined ? { size: opts.size } : {}),
        ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}),
        ...(opts.sandboxPermissions !== undefined ? { sandboxPermissions: opts.sandboxPermissions } : {}),
        ...(opts.approval !== undefined ? { approval: opts.approval } : {}),
      });
    } catch (err) {
      if (!live) this.#unregister(handle);
      throw err;
    }
    if (live) {
      // Accepted: the server no longer had the old process (pruned while it looked alive here).
      live._lost();
      this.#register(handle);
      await handle._catchUp();
    }
    if (stdinData !== undefined) {
      // A command may end without reading its input (`true`): as in a shell pipe, no error.
      await handle.sendStdin(stdinData).catch((err: unknown) => {
        if (!(err instanceof StdinClosedError)) throw err;
      });
      if (opts.tty !== true) await handle.closeStdin();
    }
    return handle;
  }

  /**
   * A handle on a process that already exists (after a resume, or one whose handle was
   * `disconnect()`ed), replaying retained output after `afterSeq` (default: from the start).
   */
  async attach(
    processId: string,
    opts: { afterSeq?: number; check?: boolean; collect?: boolean } = {},
  ): Promise<ExecHandle> {
    const id = asProcessId(processId);
    const existing = this.#handles.get(id);
    if (existing) return existing;
    const handle: ExecHandle = new ExecHandle(id, [], () => this, {
      check: opts.check ?? false,
      collect: opts.collect,
      afterSeq: opts.afterSeq,
      release: () => this.#unregister(handle),
    });
    handle._hold();
    this.#register(handle);
    try {
      await handle._catchUp();
    } catch (err) {
      this.#unregister(handle);
      throw err;
    }
    return handle;
  }

  /** Routes the notifications of `handle`'s process to it until it ends. */
  #register(handle: ExecHandle): void {
    this.#handles.set(handle.processId, handle);
    handle.onExit(() => this.#unregister(handle));
  }

  #unregister(handle: ExecHandle): void {
    if (this.#handles.get(handle.processId) === handle) this.#handles.delete(handle.processId);
  }

  async listProcesses(): Promise<ProcessSummary[]> {
    return (await this.request('process/list', {})).processes;
  }

  sessionInfo(): Promise<SessionInfo> {
    return this.request('session/info', {});
  }

  /**
   * Opens a new connection resuming this session (the old one, if still open, is closed by
   * the server), then every open handle reads what it missed after its last seq. A handle
   * whose process the server no longer has (pruned meanwhile) ends `terminal: 'lost'` with
   * what it had; the others resume. Automatic reconnection (after `disconnect()`) is on again.
   */
  reconnect(): Promise<void> {
    this.#closing = false;
    return this.#resume();
  }

  #resume(): Promise<void> {
    this.#reconnecting ??= (async () => {
      try {
        const old = this.#conn;
        const opened = await openSession(this.url, this.#opts, this.sessionId);
        if (this.#closing) {
          // `disconnect()` came while this resume was on its way.
          await opened.conn.close();
          throw new ExecServerConnectionError('disconnected while reconnecting');
        }
        await this.#adopt(old, opened);
      } finally {
        this.#reconnecting = undefined;
      }
    })();
    return this.#reconnecting;
  }

  async #adopt(old: RpcConnection, { conn, init, early }: Awaited<ReturnType<typeof openSession>>): Promise<void> {
    const handles = [...this.#handles.values()];
    for (const h of handles) h._hold();
    this.#conn = conn;
    this.initResult = init;
    this.#bind(conn, early);
    if (old.socket.readyState === old.socket.OPEN) void old.close();
    const caught = await Promise.allSettled(handles.map((h) => h._catchUp()));
    let failed: unknown;
    caught.forEach((r, i) => {
      if (r.status === 'fulfilled') return;
      if (isProcessNotFound(r.reason)) handles[i]?._lost();
      else failed ??= r.reason;
    });
    if (failed !== undefined) throw failed;
  }

  /**
   * Closes the connection; the session and its processes keep running on the server. Open
   * handles' `wait()` rejects with `ExecServerConnectionError` until `reconnect()`.
   */
  async disconnect(): Promise<void> {
    this.#closing = true;
    await this.#conn.close();
  }

  /**
   * A token that opens this session only, to hand to a browser, a sub-agent or a viewer:
   * `ExecServerClient.connect(url, { token, resumeSessionId: client.sessionId })` with it.
   * Needs the tenant token (a session token cannot mint tokens).
   */
  createToken(opts: CreateSessionToken = {}): Promise<SessionToken> {
    return this.http.createSessionToken(this.sessionId, opts);
  }

  /** Revokes a token `createToken` made. */
  revokeToken(tokenId: string): Promise<void> {
    return this.http.revokeSessionToken(this.sessionId, tokenId);
  }

  /** The snapshots taken of this session; with a session token, the only ones it can see. */
  listSnapshots(): Promise<SnapshotInfo[]> {
    return this.http.listSessionSnapshots(this.sessionId);
  }

  /** Deletes a snapshot taken of this session (`snapshotId` as listed; a `read` token cannot). */
  deleteSnapshot(snapshotId: string): Promise<void> {
    return this.http.deleteSessionSnapshot(this.sessionId, snapshotId);
  }

  /** Deletes the session (kills its processes) and closes the connection. */
  async deleteSession(): Promise<void> {
    await this.http.deleteSession(this.sessionId);
    // Only now: a refused delete (a `read` token's 403) leaves the connection as it was.
    this.#closing = true;
    await this.#conn.close();
  }

  /** @internal The underlying connection (tests). */
  get connection(): RpcConnection {
    return this.#conn;
  }
}
