/**
 * Low-level client side of the protocol: a WebSocket JSON-RPC connection with request ids,
 * notifications, and answers to server-to-client requests (approvals).
 */
import WebSocket from 'ws';
import { type ErrorCode, execError, rpcErrorBody } from '../errors.ts';
import { ExecServerConnectionError, ExecServerHttpError } from './errors.ts';
import {
  decodeBinaryOutput,
  isNotificationName,
  type MethodName,
  type MethodParams,
  type MethodResult,
  type NotificationParams,
  type ServerNotification,
} from '../protocol/index.ts';

/** How long `close()` waits for the server's half of the close handshake. */
const CLOSE_HANDSHAKE_MS = 5_000;

/** An error answer from the server, with its JSON-RPC code and our `EXEC_ERR_*` code. */
export class RpcError extends Error {
  override readonly name = 'RpcError';
  readonly rpcCode: number;
  readonly code: string | undefined;
  readonly data: Record<string, unknown> | undefined;

  constructor(rpcCode: number, message: string, data: Record<string, unknown> | undefined) {
    super(message);
    this.rpcCode = rpcCode;
    this.data = data;
    this.code = typeof data?.['code'] === 'string' ? data['code'] : undefined;
  }
}

/** The `RpcError` the server answers with `code`: for a refusal the SDK reads from an answer's status. */
export function rpcErrorOf(code: ErrorCode, message: string): RpcError {
  const body = rpcErrorBody(execError(code, message));
  return new RpcError(body.code, body.message, body.data);
}

/** `process/output` from a binary frame (binary-output.ts): the bytes as they came, no base64 `chunk`. */
export type BinaryOutputParams = Omit<NotificationParams<'process/output'>, 'chunk'> & { readonly data: Buffer };

/**
 * A notification from the server, typed by the protocol's map (`RPC_NOTIFICATIONS`): `switch
 * (n.method)` narrows `n.params`. A `process/output` has either its base64 `chunk` (a JSON
 * frame) or its bytes in `data` (a binary frame).
 */
export type Notification =
  | ServerNotification
  | { readonly method: 'process/output'; readonly params: BinaryOutputParams };

export type ServerRequestHandler = (method: string, params: Record<string, unknown>) => Promise<unknown> | unknown;

/** Options of one `RpcConnection`: auth, how server requests are answered, message bounds. */
export interface RpcConnectionOptions {
  readonly token?: string | undefined;
  /** Default handler answers every server request with an error (no approvals given). */
  readonly onServerRequest?: ServerRequestHandler | undefined;
  /** Send `"jsonrpc":"2.0"` on every message. */
  readonly jsonrpc?: boolean | undefined;
  readonly maxPayload?: number | undefined;
  /** Bound of the upgrade in ms (default: none): past it `open` rejects with `ExecServerConnectionError`. */
  readonly timeoutMs?: number | undefined;
}

interface Waiter {
  resolve(value: unknown): void;
  reject(err: Error): void;
}

const OUTPUT_PREFIXES = ['{"method":"process/output",', '{"jsonrpc":"2.0","method":"process/output",'].map((p) =>
  Buffer.from(p),
);
const CHUNK_KEY = Buffer.from(',"chunk":"');
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * `process/output` notifications are nearly all a stream carries, and nearly all of each is its
 * base64 chunk: the small head is parsed as JSON and the chunk taken from the frame as it is,
 * instead of the whole frame decoded into one string and parsed (a third of the client's CPU
 * per streamed byte). Exported for its unit test. Only the exact shape qualifies: the chunk last, free of quotes and escapes
 * up to the closing `"}}`; anything else takes the general path.
 */
export function outputNotification(data: Buffer): Record<string, unknown> | undefined {
  if (!OUTPUT_PREFIXES.some((p) => data.length > p.length && data.compare(p, 0, p.length, 0, p.length) === 0))
    return undefined;
  const at = data.indexOf(CHUNK_KEY);
  const start = at + CHUNK_KEY.length;
  const end = data.length - 3;
  if (at < 0 || data[end + 1] !== 0x7d || data[end + 2] !== 0x7d) return undefined;
  if (data.indexOf(QUOTE, start) !== end) return undefined;
  const backslash = data.indexOf(BACKSLASH, start);
  if (backslash >= 0 && backslash < end) return undefined;
  let head: unknown;
  try {
    head = JSON.parse(`${data.toString('utf8', 0, at)}}}`);
  } catch {
    return undefined;
  }
  const params = (head as { params?: unknown }).params;
  if (typeof params !== 'object' || params === null) return undefined;
  (params as Record<string, unknown>)['chunk'] = data.toString('latin1', start, end);
  return head as Record<string, unknown>;
}

/** One WebSocket JSON-RPC connection: request ids, notifications, answers to server requests. */
export class RpcConnection {
  readonly socket: WebSocket;
  readonly #pending = new Map<number, Waiter>();
  readonly #listeners = new Set<(n: Notification) => void>();
  readonly #closeListeners = new Set<(code: number, reason: string) => void>();
  readonly #opts: RpcConnectionOptions;
  #nextId = 1;
  closeCode: number | undefined;
  closeReason = '';

  private constructor(socket: WebSocket, opts: RpcConnectionOptions) {
    this.socket = socket;
    this.#opts = opts;
    socket.on('message', (data: Buffer, isBinary: boolean) => {
      if (isBinary) {
        this.#onBinary(data);
        return;
      }
      const output = outputNotification(data);
      if (output) this.#dispatch(output);
      else this.#onMessage(String(data));
    });
    socket.on('close', (code, reason) => {
      this.closeCode = code;
      this.closeReason = reason.toString();
      for (const w of this.#pending.values())
        w.reject(new ExecServerConnectionError(`connection closed (${code} ${this.closeReason})`));
      this.#pending.clear();
      for (const l of this.#closeListeners) l(code, this.closeReason);
    });
  }

  /**
   * Opens the socket; rejects with the HTTP status when the upgrade is refused (e.g. 401), and
   * with `ExecServerConnectionError` when no upgrade came within `timeoutMs`.
   */
  static open(url: string, opts: RpcConnectionOptions = {}): Promise<RpcConnection> {
    const headers: Record<string, string> = opts.token ? { authorization: `Bearer ${opts.token}` } : {};
    const socket = new WebSocket(url, { headers, maxPayload: opts.maxPayload ?? 256 * 1024 * 1024 });
    const opened = new Promise<RpcConnection>((resolve, reject) => {
      socket.once('open', () => resolve(new RpcConnection(socket, opts)));
      socket.once('unexpected-response', (req, res) => {
        // The refusal's body carries the server's stable code (a bounded read: 64 KiB at most).
        const status = res.statusCode ?? 0;
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size <= 64 * 1024) chunks.push(c);
        });
        res.once('end', () => {
          // ws leaves the request open once this event has a listener; end it ourselves.
          req.destroy();
          let body: unknown;
          try {
            body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
          } catch {
            body = undefined;
          }
          reject(
            Object.assign(ExecServerHttpError.of(status, body, `upgrade refused: HTTP ${status}`), {
              statusCode: status,
            }),
          );
        });
        res.once('error', () => {
          req.destroy();
          reject(
            Object.assign(new ExecServerHttpError(status, `HTTP_${status}`, `upgrade refused: HTTP ${status}`), {
              statusCode: status,
            }),
          );
        });
      });
      socket.once('error', reject);
    });
    const ms = opts.timeoutMs;
    if (ms === undefined || ms === Infinity) return opened;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        reject(new ExecServerConnectionError(`no WebSocket upgrade from ${url} within ${ms} ms`));
        // The socket's own error (handshake aborted) then rejects `opened`, which nobody awaits.
        opened.catch(() => undefined);
        socket.terminate();
      }, ms);
    });
    return Promise.race([opened, timedOut]).finally(() => clearTimeout(timer));
  }

  #send(message: Record<string, unknown>): void {
    this.socket.send(JSON.stringify(this.#opts.jsonrpc ? { jsonrpc: '2.0', ...message } : message));
  }

  /** A binary frame is a `process/output` (asked for at initialize): its data handed on as bytes. */
  #onBinary(frame: Buffer): void {
    const o = decodeBinaryOutput(frame);
    if (typeof o === 'string') return;
    this.#notified({
      method: 'process/output',
      params: { processId: o.processId, seq: o.seq, stream: o.stream, data: o.data },
    });
  }

  #onMessage(text: string): void {
    let msg: unknown;
    try {
      msg = JSON.parse(text);
    } catch {
      return;
    }
    for (const m of Array.isArray(msg) ? msg : [msg]) this.#dispatch(m as Record<string, unknown>);
  }

  #dispatch(m: Record<string, unknown>): void {
    const id = m['id'];
    if (typeof m['method'] === 'string') {
      const params = (m['params'] ?? {}) as Record<string, unknown>;
      if (id === undefined) {
        // The server's params are typed by its own schemas; a method this SDK does not know
        // (a newer server's) has no type to give, and no handler here to use it.
        if (isNotificationName(m['method'])) this.#notified({ method: m['method'], params } as ServerNotification);
        return;
      }
      void this.#answer(id as string | number, m['method'], params);
      return;
    }
    if (typeof id !== 'number') return;
    const waiter = this.#pending.get(id);
    if (!waiter) return;
    this.#pending.delete(id);
    const error = m['error'] as { code: number; message: string; data?: Record<string, unknown> } | undefined;
    if (error) waiter.reject(new RpcError(error.code, error.message, error.data));
    else waiter.resolve(m['result']);
  }

  #notified(n: Notification): void {
    for (const l of this.#listeners) l(n);
  }

  async #answer(id: string | number, method: string, params: Record<string, unknown>): Promise<void> {
    const handler = this.#opts.onServerRequest;
    try {
      // Sent back to the server as the answer's error, never thrown at the caller.
      if (!handler) throw new Error(`no handler for ${method}`);
      const result = await handler(method, params);
      if (this.socket.readyState === WebSocket.OPEN) this.#send({ id, result });
    } catch (err) {
      if (this.socket.readyState === WebSocket.OPEN)
        this.#send({ id, error: { code: -32603, message: (err as Error).message } });
    }
  }

  /** A protocol method: params and answer typed by its schemas (src/protocol/methods.ts). */
  request<M extends MethodName>(method: M, params: MethodParams<M>): Promise<MethodResult<M>>;
  /** Any method (an extension this SDK does not know yet): the answer typed as the caller says. */
  request<T = Record<string, unknown>>(method: string, params?: unknown): Promise<T>;
  request(method: string, params?: unknown): Promise<unknown> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      if (this.socket.readyState !== WebSocket.OPEN) {
        reject(new ExecServerConnectionError('connection is not open'));
        return;
      }
      this.#pending.set(id, { resolve, reject });
      this.#send({ id, method, ...(params === undefined ? {} : { params }) });
    });
  }

  notify(method: string, params?: unknown): void {
    this.#send({ method, ...(params === undefined ? {} : { params }) });
  }

  onNotification(listener: (n: Notification) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  onClose(listener: (code: number, reason: string) => void): () => void {
    this.#closeListeners.add(listener);
    return () => this.#closeListeners.delete(listener);
  }

  /**
   * Resolves once the socket is closed. A server that does not answer the close handshake
   * within `CLOSE_HANDSHAKE_MS` (busy, or its side of the socket stalled) gets the socket
   * torn down instead, so closing never hangs.
   */
  close(): Promise<void> {
    if (this.socket.readyState === WebSocket.CLOSED) return Promise.resolve();
    return new Promise((resolve) => {
      const force = setTimeout(() => this.socket.terminate(), CLOSE_HANDSHAKE_MS);
      this.socket.once('close', () => {
        clearTimeout(force);
        resolve();
      });
      // A paused socket would never read the server's close frame.
      this.socket.resume();
      this.socket.close();
    });
  }
}
