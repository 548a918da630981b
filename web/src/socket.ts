/**
 * The console's WebSocket to one session: JSON-RPC as the SDK speaks it, attached as an
 * observer (`initialize {resumeSessionId, observe: true}`, so the agent that owns the session
 * is not evicted). A dropped socket reconnects with backoff; `onReopen` then lets each
 * follower read from its last seq (process-stream.ts), so no output is lost.
 */
// Types only: a value import would bundle the schemas (and TypeBox) into the console.
import type {
  InitializeResult,
  MethodName,
  MethodParams,
  MethodResult,
  ServerNotification,
} from '../../src/protocol/methods.ts';
import { utf8Base64Url } from './bytes.ts';

export type SocketState =
  | { readonly kind: 'connecting' }
  | { readonly kind: 'open'; readonly reconnects: number }
  | { readonly kind: 'reconnecting'; readonly attempt: number; readonly why: string }
  | { readonly kind: 'closed'; readonly why: string };

export class RpcError extends Error {
  override readonly name = 'RpcError';
  readonly code: string | undefined;
  constructor(message: string, code: string | undefined) {
    super(message);
    this.code = code;
  }
}

/** A server notification, typed by the protocol's map: `switch (n.method)` narrows `n.params`. */
export type Notification = ServerNotification;

export interface SessionSocketOptions {
  readonly sessionId: string;
  readonly token: string;
  readonly onState: (state: SocketState) => void;
  readonly onNotification: (n: Notification) => void;
  /** Called after every successful (re)initialize. */
  readonly onOpen: (initialize: InitializeResult, reconnected: boolean) => void;
}

/** Close codes after which reconnecting is pointless (docs/protocol.md). */
const FINAL_CLOSE = new Map([[4000, 'the session was deleted, or another console took it over']]);
const REQUEST_TIMEOUT_MS = 30_000;
const MAX_BACKOFF_MS = 5_000;

interface Pending {
  readonly resolve: (value: unknown) => void;
  readonly reject: (err: Error) => void;
  readonly timer: ReturnType<typeof setTimeout>;
}

export class SessionSocket {
  readonly #opts: SessionSocketOptions;
  #ws: WebSocket | undefined;
  #nextId = 1;
  readonly #pending = new Map<number, Pending>();
  #ready = false;
  #closed = false;
  #attempt = 0;
  #reconnects = 0;
  #retryTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(opts: SessionSocketOptions) {
    this.#opts = opts;
    this.#connect();
  }

  get ready(): boolean {
    return this.#ready;
  }

  #url(): string {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    return `${proto}//${location.host}/v1/ws`;
  }

  #connect(): void {
    const protocols = ['exec-server'];
    if (this.#opts.token !== '') protocols.push(`exec-server.bearer.${utf8Base64Url(this.#opts.token)}`);
    const ws = new WebSocket(this.#url(), protocols);
    this.#ws = ws;
    let opened = false;
    ws.onopen = () => {
      opened = true;
      void this.#initialize(ws);
    };
    ws.onmessage = (e) => this.#onMessage(typeof e.data === 'string' ? e.data : '');
    ws.onclose = (e) => {
      if (this.#ws !== ws) return;
      this.#ready = false;
      this.#failPending(new RpcError('the connection closed', 'EXEC_ERR_DISCONNECTED'));
      if (this.#closed) return;
      const final = FINAL_CLOSE.get(e.code);
      if (final) {
        this.#closed = true;
        this.#opts.onState({ kind: 'closed', why: final });
        return;
      }
      this.#scheduleRetry(opened ? `connection lost (code ${e.code})` : 'cannot connect');
    };
  }

  #scheduleRetry(why: string): void {
    const attempt = ++this.#attempt;
    this.#opts.onState({ kind: 'reconnecting', attempt, why });
    const delay = Math.min(MAX_BACKOFF_MS, 250 * 2 ** Math.min(attempt - 1, 5));
    this.#retryTimer = setTimeout(() => this.#connect(), delay);
  }

  async #initialize(ws: WebSocket): Promise<void> {
    try {
      const init = (await this.#call(ws, 'initialize', {
        clientName: 'exec-server-console',
        resumeSessionId: this.#opts.sessionId,
        observe: true,
      })) as InitializeResult;
      ws.send(JSON.stringify({ method: 'initialized', params: {} }));
      this.#ready = true;
      const reconnected = this.#reconnects++ > 0;
      this.#attempt = 0;
      this.#opts.onState({ kind: 'open', reconnects: this.#reconnects - 1 });
      this.#opts.onOpen(init, reconnected);
    } catch (err) {
      const e = err as RpcError;
      if (e.code === 'EXEC_ERR_SESSION_NOT_FOUND' || e.code === 'EXEC_ERR_INVALID_PARAMS') {
        this.#closed = true;
        this.#opts.onState({ kind: 'closed', why: e.message });
        ws.close();
      }
    }
  }

  #onMessage(text: string): void {
    let msg: Record<string, unknown>;
    try {
      msg = JSON.parse(text) as Record<string, unknown>;
    } catch {
      return;
    }
    const id = msg['id'];
    if (typeof msg['method'] === 'string') {
      if (id !== undefined && id !== null) {
        // Observers are never asked for approvals; answer anything else with an error.
        this.#ws?.send(
          JSON.stringify({ id, error: { code: -32601, message: 'the console answers no server requests' } }),
        );
        return;
      }
      // The server that serves the console is of its version: its notifications are the protocol's.
      this.#opts.onNotification({ method: msg['method'], params: msg['params'] ?? {} } as ServerNotification);
      return;
    }
    if (typeof id !== 'number') return;
    const pending = this.#pending.get(id);
    if (!pending) return;
    this.#pending.delete(id);
    clearTimeout(pending.timer);
    const error = msg['error'] as { message?: string; data?: { code?: string } } | undefined;
    if (error) pending.reject(new RpcError(error.message ?? 'request failed', error.data?.code));
    else pending.resolve(msg['result']);
  }

  #call(ws: WebSocket, method: string, params: unknown): Promise<unknown> {
    return new Promise((resolve, reject) => {
      if (ws.readyState !== WebSocket.OPEN) {
        reject(new RpcError('not connected', 'EXEC_ERR_DISCONNECTED'));
        return;
      }
      const id = this.#nextId++;
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new RpcError(`${method} got no answer within ${REQUEST_TIMEOUT_MS / 1000} s`, 'EXEC_ERR_TIMEOUT'));
      }, REQUEST_TIMEOUT_MS);
      this.#pending.set(id, { resolve, reject, timer });
      ws.send(JSON.stringify({ id, method, params }));
    });
  }

  /** A request on the current connection; rejects at once while reconnecting. */
  request<M extends MethodName>(method: M, params: MethodParams<M>): Promise<MethodResult<M>> {
    const ws = this.#ws;
    if (!ws || !this.#ready)
      return Promise.reject(new RpcError('not connected (reconnecting)', 'EXEC_ERR_DISCONNECTED'));
    return this.#call(ws, method, params) as Promise<MethodResult<M>>;
  }

  #failPending(err: Error): void {
    for (const p of this.#pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    this.#pending.clear();
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#retryTimer);
    this.#ready = false;
    this.#failPending(new RpcError('closed', 'EXEC_ERR_DISCONNECTED'));
    this.#ws?.close(1000, 'console view closed');
  }
}
