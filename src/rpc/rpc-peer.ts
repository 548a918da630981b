/**
 * One JSON-RPC peer over a message transport (a WebSocket): parses frames, dispatches requests
 * through the method table, answers them, sends notifications, and makes server-to-client
 * requests (approvals) with timeouts. Hand-written rather than json-rpc-2.0 because the
 * framing rules are Codex's (optional `"jsonrpc"`, echoed only if the client sent it; -32700
 * keeps the connection) and errors must carry our registry codes.
 */
import { execError, rpcErrorBody, toExecError, type ExecServerError } from '../errors.ts';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import {
  binaryOutputBytes,
  encodeBinaryOutput,
  type NotificationName,
  type NotificationParams,
  type StreamName,
} from '../protocol/index.ts';
import { FramePool } from './frame-pool.ts';
import type { MethodTable } from './method-table.ts';

/** Where a peer's messages go: the connection's socket, behind what the route puts in between. */
export interface RpcTransport {
  /**
   * One JSON text message; a Buffer holds its UTF-8 bytes (sent as a text frame all the same).
   * `sent` runs once the socket is done with a Buffer (written, or failed); a frame dropped
   * on a closed socket never gets it. The Buffer is not reused before.
   */
  send(text: string | Buffer, sent?: () => void): void;
  /** One binary frame (a `process/output` the client asked to get as bytes: binary-output.ts). */
  sendBinary(frame: Buffer, sent?: () => void): void;
}

/**
 * Output frames: a chunk is at most 16 KiB (processes/output-coalescer.ts), 21,848 bytes of
 * base64 plus the envelope; a bigger frame is a plain allocation.
 */
const outputFrames = new FramePool(32 * 1024, 64);
type Id = string | number;

interface Pending {
  resolve(value: unknown): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

/** What a peer runs with: the method table, its context, its transport, logs and metrics. */
export interface RpcPeerOptions<Ctx> {
  readonly table: MethodTable<Ctx>;
  readonly ctx: Ctx;
  readonly transport: RpcTransport;
  readonly log: Logger;
  readonly metrics: Metrics;
  /** Throws when `method` may not run yet (initialize gating). */
  readonly gate: (method: string, requires: 'none' | 'initialized') => void;
  /** Called for client notifications (`initialized`). */
  readonly onNotification: (method: string, params: unknown) => void;
  readonly maxBatch?: number;
}

const MAX_BATCH = 64;
/** Requests of one connection being handled at once (long polls included); bounds memory. */
const MAX_IN_FLIGHT = 1024;

function isId(value: unknown): value is Id {
  return typeof value === 'string' || (typeof value === 'number' && Number.isFinite(value));
}

/** The JSON-RPC side of one connection: Codex's framing rules, calls through the method table, notifications. */
export class RpcPeer<Ctx> {
  /** Whether replies carry `"jsonrpc":"2.0"` (only when the client's initialize did). */
  tagReplies = false;
  /** The client asked for `process/output` as binary frames (`initialize { binaryOutput }`). */
  binaryOutput = false;
  readonly #opts: RpcPeerOptions<Ctx>;
  readonly #pending = new Map<Id, Pending>();
  readonly #inflight = new AbortController();
  #nextId = 1;
  #running = 0;
  /** The `initialize` whose framing the connection has (`#adoptFraming`). */
  #framingOf: Record<string, unknown> | undefined;
  #closed = false;

  constructor(opts: RpcPeerOptions<Ctx>) {
    this.#opts = opts;
  }

  get closed(): boolean {
    return this.#closed;
  }

  #send(message: Record<string, unknown> | unknown[]): void {
    if (this.#closed) return;
    this.#opts.transport.send(JSON.stringify(message));
  }

  #envelope(body: Record<string, unknown>): Record<string, unknown> {
    return this.tagReplies ? { jsonrpc: '2.0', ...body } : body;
  }

  #errorBody(id: Id | null, err: ExecServerError): Record<string, unknown> {
    return this.#envelope({ id, error: rpcErrorBody(err) });
  }

  /** A notification of the protocol, its params typed by its method (`RPC_NOTIFICATIONS`). */
  notify<N extends NotificationName>(method: N, params: NotificationParams<N>): void {
    this.#send(this.#envelope({ method, params }));
  }

  /**
   * The output hot path: a `process/output` notification written straight into one Buffer
   * (ASCII only: the id is JSON-escaped, the chunk is base64, which needs no escaping), with
   * no JSON.stringify pass and no UTF-8 re-encoding of the large base64 text.
   */
  notifyOutput(processId: string, seq: number, stream: StreamName, data: Buffer): void {
    if (this.#closed) return;
    if (this.binaryOutput) {
      const { frame, release } = outputFrames.take(binaryOutputBytes(processId, data.length));
      encodeBinaryOutput(frame, { processId, seq, stream, data });
      this.#opts.transport.sendBinary(frame, release);
      return;
    }
    const head = `{${this.tagReplies ? '"jsonrpc":"2.0",' : ''}"method":"process/output","params":{"processId":${JSON.stringify(processId)},"seq":${seq},"stream":"${stream}","chunk":"`;
    const headBytes = Buffer.byteLength(head);
    const b64Bytes = 4 * Math.ceil(data.length / 3);
    const { frame, release } = outputFrames.take(headBytes + b64Bytes + 3);
    frame.write(head, 0, 'utf8');
    frame.write(data.toString('base64'), headBytes, 'latin1');
    frame.write('"}}', headBytes + b64Bytes, 'latin1');
    this.#opts.transport.send(frame, release);
  }

  /** Server-to-client request; rejects on timeout, on an error answer and on close. */
  request(method: string, params: unknown, timeoutMs: number): Promise<unknown> {
    if (this.#closed) return Promise.reject(execError('EXEC_ERR_REJECTED', 'connection closed'));
    const id = `srv-${this.#nextId++}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(execError('EXEC_ERR_REJECTED', `no answer to ${method} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#pending.set(id, { resolve, reject, timer });
      this.#send(this.#envelope({ id, method, params }));
    });
  }

  /** Handles one text frame. Never throws: every problem becomes an error reply. */
  handleFrame(text: string): void {
    let message: unknown;
    try {
      message = JSON.parse(text);
    } catch {
      this.#send(this.#errorBody(null, execError('EXEC_ERR_PARSE', 'parse error: invalid JSON')));
      return;
    }
    if (Array.isArray(message)) {
      void this.#handleBatch(message);
      return;
    }
    void this.#handleOne(message).then((reply) => {
      if (reply) this.#send(reply);
    });
  }

  async #handleBatch(batch: unknown[]): Promise<void> {
    const max = this.#opts.maxBatch ?? MAX_BATCH;
    if (batch.length === 0 || batch.length > max) {
      this.#send(this.#invalid(null, batch.length === 0 ? 'empty batch' : `batch of ${batch.length} exceeds ${max}`));
      return;
    }
    const replies = (await Promise.all(batch.map((m) => this.#handleOne(m)))).filter(
      (r): r is Record<string, unknown> => r !== undefined,
    );
    if (replies.length > 0) this.#send(replies);
  }

  async #handleOne(message: unknown): Promise<Record<string, unknown> | undefined> {
    if (typeof message !== 'object' || message === null) return this.#invalid(null, 'message must be a JSON object');
    const m = message as Record<string, unknown>;
    const id = m['id'];
    const method = m['method'];
    if (typeof method !== 'string') {
      if (isId(id) && ('result' in m || 'error' in m)) {
        this.#settle(id, m);
        return undefined;
      }
      return this.#invalid(isId(id) ? id : null, 'missing method');
    }
    if (id === undefined) {
      this.#opts.onNotification(method, m['params']);
      return undefined;
    }
    if (!isId(id)) return this.#invalid(null, 'id must be a string or a number');
    const def = this.#opts.table.get(method);
    if (!def) {
      this.#opts.metrics.rpcRequests.inc({ method: 'unknown', result: 'error' });
      return this.#errorBody(id, execError('EXEC_ERR_METHOD_NOT_FOUND', `method not found: ${method}`));
    }
    if (this.#running >= MAX_IN_FLIGHT) {
      this.#opts.metrics.rpcRequests.inc({ method, result: 'error' });
      return this.#errorBody(
        id,
        execError(
          'EXEC_ERR_BUSY',
          `too many requests in flight on this connection (limit ${MAX_IN_FLIGHT}); wait for answers first`,
        ),
      );
    }
    this.#running++;
    let undoFraming: (() => void) | undefined;
    try {
      this.#opts.gate(method, def.requires);
      if (method === 'initialize') undoFraming = this.#adoptFraming(m);
      const result = await def.run(m['params'] ?? {}, this.#opts.ctx, this.#inflight.signal);
      this.#opts.metrics.rpcRequests.inc({ method, result: 'ok' });
      return this.#envelope({ id, result: result ?? {} });
    } catch (err) {
      const e = toExecError(err);
      this.#opts.metrics.rpcRequests.inc({ method, result: 'error' });
      if (e.code === 'EXEC_ERR_INTERNAL') this.#opts.log.error({ err, method }, 'internal error in RPC handler');
      const reply = this.#errorBody(id, e);
      undoFraming?.();
      return reply;
    } finally {
      this.#running--;
    }
  }

  /**
   * The framing an `initialize` asks for (`"jsonrpc"` echoed, binary output frames), taken once
   * the gate admitted it, so that what it sends on its way (image pull notices, the output of a
   * resumed session) and its answer are framed already; undone when it fails. The gate admits
   * one only while none succeeded, so the framing before it is the default one; a refused
   * `initialize` (a second one, bad params) leaves the connection's framing as it was.
   */
  #adoptFraming(m: Record<string, unknown>): () => void {
    this.#framingOf = m;
    this.tagReplies = m['jsonrpc'] === '2.0';
    this.binaryOutput = (m['params'] as { binaryOutput?: unknown } | undefined)?.binaryOutput === true;
    return () => {
      // A later initialize of the same batch may have been admitted meanwhile: its framing stays.
      if (this.#framingOf !== m) return;
      this.#framingOf = undefined;
      this.tagReplies = false;
      this.binaryOutput = false;
    };
  }

  #invalid(id: Id | null, why: string): Record<string, unknown> {
    return this.#errorBody(id, execError('EXEC_ERR_INVALID_REQUEST', `invalid request: ${why}`));
  }

  #settle(id: Id, m: Record<string, unknown>): void {
    const pending = this.#pending.get(id);
    if (!pending) return;
    this.#pending.delete(id);
    clearTimeout(pending.timer);
    if ('error' in m)
      pending.reject(execError('EXEC_ERR_REJECTED', `client answered with an error: ${JSON.stringify(m['error'])}`));
    else pending.resolve(m['result']);
  }

  /** Aborts in-flight long polls and fails pending server requests. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#inflight.abort();
    for (const [id, p] of this.#pending) {
      clearTimeout(p.timer);
      p.reject(execError('EXEC_ERR_REJECTED', 'connection closed'));
      this.#pending.delete(id);
    }
  }
}
