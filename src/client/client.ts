/**
 * `ExecServerClient`: one session over WebSocket JSON-RPC (processes, approvals, resume) plus
 * the REST API for sessions (`client.http`).
 *
 *   const client = await ExecServerClient.connect('ws://127.0.0.1:8765', { token });
 *   const proc = await client.exec(['bash', '-c', 'echo hi']);
 *   const { stdout } = await proc.wait();
 *
 * A dropped connection can be resumed (`reconnect()`, or automatically with `autoReconnect`):
 * the session's processes kept running on the server, and every open handle fills its gap
 * from its last seq with `process/read`, so each byte arrives once, in order.
 */
import { randomUUID } from 'node:crypto';
import { asProcessId, asSessionId, type ProcessId, type SessionId } from '../ids.ts';
import type {
  CreateSessionToken,
  DrainingNotification,
  SessionToken,
  ApprovalDecision,
  ApprovalRequest,
  ImagePull,
  InitializeResult,
  MethodName,
  MethodParams,
  MethodResult,
  ProcessSummary,
  SessionInfo,
  SessionSpec,
} from '../protocol/index.ts';
import { HttpApi, wsUrlOf } from './http.ts';
import { ExecHandle, type ProcessEvent } from './process-handle.ts';
import { RpcConnection, type Notification } from './rpc-connection.ts';

function isProcessNotification(n: Notification): n is ProcessEvent {
  return n.method.startsWith('process/');
}

export type { ApprovalDecision, ApprovalRequest, ImagePull, ProcessSummary } from '../protocol/index.ts';

export interface ConnectOptions {
  readonly token?: string | undefined;
  /** Spec of the new session (ignored with `resumeSessionId`). */
  readonly session?: SessionSpec | undefined;
  /** Re-attach to a live session instead of creating one. */
  readonly resumeSessionId?: string | undefined;
  /** Answers `approval/request`; without it every approval is denied. */
  readonly onApproval?: ((request: ApprovalRequest) => ApprovalDecision | Promise<ApprovalDecision>) | undefined;
  readonly clientName?: string | undefined;
  /**
   * Progress of the image pull a new session waits for (docker: its image is missing on the
   * server's engine), from the server's `session/imagePull` notifications: once when the wait
   * begins, at most every 500 ms while it lasts, and a last `pulled` or `failed`, all before
   * `connect` resolves or rejects. Never called when the image is there.
   */
  readonly onImagePull?: ((pull: ImagePull) => void) | undefined;
  /** Resume automatically when the connection drops (not after `disconnect()` or an eviction). */
  readonly autoReconnect?: boolean | { readonly attempts?: number; readonly delayMs?: number } | undefined;
  /**
   * Resume automatically, for up to a minute, when the server drains for a rollout
   * (`server/draining`, close code 1012), even without `autoReconnect` (default true).
   */
  readonly reconnectOnDrain?: boolean | undefined;
  /** Told when the server announces it is draining (`server/draining`), before the connection closes. */
  readonly onDraining?: ((notice: DrainingNotification) => void) | undefined;
}

/** Close code of a server draining for a rollout (docs/protocol.md). */
export const DRAIN_CLOSE_CODE = 1012;

interface ReconnectPlan {
  readonly attempts?: number | undefined;
  readonly delayMs?: number | undefined;
  readonly maxDelayMs?: number | undefined;
}

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

export class ExecServerClient {
  readonly url: string;
  readonly sessionId: SessionId;
  readonly http: HttpApi;
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
    this.#bind(conn);
  }

  /** Opens a connection and initializes a new (or resumed) session. */
  static async connect(url: string, opts: ConnectOptions = {}): Promise<ExecServerClient> {
    const { conn, init } = await ExecServerClient.#open(wsUrlOf(url), opts, opts.resumeSessionId);
    return new ExecServerClient(wsUrlOf(url), conn, init, opts);
  }

  static async #open(
    url: string,
    opts: ConnectOptions,
    resumeSessionId: string | undefined,
  ): Promise<{ conn: RpcConnection; init: InitializeResult; early: Notification[] }> {
    const conn = await RpcConnection.open(url, {
      token: opts.token,
      onServerRequest: async (method, params) => {
        // Answered to the server as an error (the server then denies): the caller never sees it.
        if (method !== 'approval/request') throw new Error(`unsupported server request ${method}`);
        const decision = opts.onApproval ? await opts.onApproval(params as ApprovalRequest) : 'denied';
        return { decision };
      },
    });
    const early: Notification[] = [];
    const off = conn.onNotification((n) => {
      if (n.method === 'session/imagePull') opts.onImagePull?.(n.params);
      else early.push(n);
    });
    try {
      const init = await conn.request('initialize', {
        clientName: opts.clientName ?? 'exec-server-sdk',
        // Output as bytes, not base64 in JSON; a server without the extension ignores it.
        binaryOutput: true,
        ...(resumeSessionId !== undefined
          ? { resumeSessionId }
          : opts.session !== undefined
            ? { session: opts.session }
            : {}),
      });
      conn.notify('initialized', {});
      return { conn, init, early };
    } catch (err) {
      await conn.close();
      throw err;
    } finally {
      off();
    }
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
      if (plan) void this.#autoReconnect(plan).catch(() => undefined);
    });
  }

  /** Whether (and how) to resume after a close with `code`: a drain (rollout), or `autoReconnect`. */
  #reconnectPlan(code: number): ReconnectPlan | undefined {
    if (this.#closing || code === 4000) return undefined;
    const drained = code === DRAIN_CLOSE_CODE || this.#drainRetryMs !== undefined;
    // A rollout: the next server may take a while to come up (about a minute at most).
    if (drained && this.#opts.reconnectOnDrain !== false)
      return { attempts: 60, delayMs: Math.max(this.#drainRetryMs ?? 500, 100), maxDelayMs: 2000 };
    const auto = this.#opts.autoReconnect;
    return auto ? (auto === true ? {} : auto) : undefined;
  }

  async #autoReconnect(opts: ReconnectPlan): Promise<void> {
    const attempts = opts.attempts ?? 10;
    for (let i = 0; i < attempts && !this.#closing; i++) {
      const delay = (opts.delayMs ?? 200) * (i + 1);
      await new Promise((r) => setTimeout(r, Math.min(delay, opts.maxDelayMs ?? delay)));
      try {
        await this.reconnect();
        return;
      } catch {
        // try again
      }
    }
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
    const handle = new ExecHandle(processId, argv, () => this, { check: opts.check, collect: opts.collect });
    // Registered before the start so no early notification is missed.
    this.#handles.set(processId, handle);
    handle.onExit(() => this.#handles.delete(processId));
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
      this.#handles.delete(processId);
      throw err;
    }
    if (stdinData !== undefined) {
      await handle.sendStdin(stdinData);
      if (opts.tty !== true) await handle.closeStdin();
    }
    return handle;
  }

  /** A handle on a process that already exists (after a resume), replaying retained output after `afterSeq` (default: from the start). */
  async attach(
    processId: string,
    opts: { afterSeq?: number; check?: boolean; collect?: boolean } = {},
  ): Promise<ExecHandle> {
    const id = asProcessId(processId);
    const existing = this.#handles.get(id);
    if (existing) return existing;
    const handle = new ExecHandle(id, [], () => this, {
      check: opts.check ?? false,
      collect: opts.collect,
      afterSeq: opts.afterSeq,
    });
    handle._hold();
    this.#handles.set(id, handle);
    handle.onExit(() => this.#handles.delete(id));
    try {
      await handle._catchUp();
    } catch (err) {
      this.#handles.delete(id);
      throw err;
    }
    return handle;
  }

  async listProcesses(): Promise<ProcessSummary[]> {
    return (await this.request('process/list', {})).processes;
  }

  sessionInfo(): Promise<SessionInfo> {
    return this.request('session/info', {});
  }

  /**
   * Opens a new connection resuming this session (the old one, if still open, is closed by
   * the server), then every open handle reads what it missed after its last seq.
   */
  reconnect(): Promise<void> {
    this.#reconnecting ??= (async () => {
      try {
        const old = this.#conn;
        const { conn, init, early } = await ExecServerClient.#open(this.url, this.#opts, this.sessionId);
        const handles = [...this.#handles.values()];
        for (const h of handles) h._hold();
        this.#conn = conn;
        this.initResult = init;
        this.#bind(conn, early);
        if (old.socket.readyState === old.socket.OPEN) void old.close();
        await Promise.all(handles.map((h) => h._catchUp()));
      } finally {
        this.#reconnecting = undefined;
      }
    })();
    return this.#reconnecting;
  }

  /** Closes the connection; the session and its processes keep running on the server. */
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

  /** Deletes the session (kills its processes) and closes the connection. */
  async deleteSession(): Promise<void> {
    this.#closing = true;
    await this.http.deleteSession(this.sessionId);
    await this.#conn.close();
  }

  /** @internal The underlying connection (tests). */
  get connection(): RpcConnection {
    return this.#conn;
  }
}
