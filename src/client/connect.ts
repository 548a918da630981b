/**
 * Opening a session's connection: the WebSocket upgrade, then `initialize` (a new session, or
 * the resume of one), both within `connectTimeoutMs`, so a server (or a proxy in between) that
 * accepts the TCP connection and then says nothing fails the connect instead of hanging it.
 */
import type {
  ApprovalDecision,
  ApprovalRequest,
  DrainingNotification,
  ImagePull,
  InitializeResult,
  SessionSpec,
} from '../protocol/index.ts';
import { ExecServerConnectionError } from './errors.ts';
import { RpcConnection, type Notification } from './rpc-connection.ts';

/** How long a connect (or a resume) may take by default: upgrade plus `initialize`. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 30_000;

/** Options of `ExecServerClient.connect`: auth, the session to make or resume, approvals, bounds and reconnects. */
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
  /**
   * Bound of a connect, and of each resume, in ms: the WebSocket upgrade and the `initialize`
   * answer (default 30 000; 0 waits for ever). Each image-pull progress notice starts it again,
   * since a pull in progress is a server at work. Past it the connect rejects with
   * `ExecServerConnectionError`.
   */
  readonly connectTimeoutMs?: number | undefined;
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

/** A connection whose `initialize` succeeded, with the notifications that came before it was bound. */
export interface OpenedSession {
  readonly conn: RpcConnection;
  readonly init: InitializeResult;
  readonly early: Notification[];
}

function timeoutOf(opts: ConnectOptions): number {
  const ms = opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  if (typeof ms !== 'number' || Number.isNaN(ms) || ms < 0)
    throw new TypeError('connectTimeoutMs must be a number of ms, 0 or more');
  return ms === 0 ? Infinity : ms;
}

/** A timer that fires after `first` ms, or `every` ms after its last restart; `Infinity` never fires. */
function deadline(first: number, every: number, onExpiry: () => void): { restart(): void; clear(): void } {
  let timer: NodeJS.Timeout | undefined;
  const arm = (ms: number): void => {
    clearTimeout(timer);
    if (ms !== Infinity) timer = setTimeout(onExpiry, Math.max(ms, 0));
  };
  arm(first);
  return { restart: () => arm(every), clear: () => clearTimeout(timer) };
}

/** Opens a connection to `url` and initializes a new session, or resumes `resumeSessionId`. */
export async function openSession(
  url: string,
  opts: ConnectOptions,
  resumeSessionId: string | undefined,
): Promise<OpenedSession> {
  const ms = timeoutOf(opts);
  const started = Date.now();
  const conn = await RpcConnection.open(url, {
    token: opts.token,
    timeoutMs: ms,
    onServerRequest: async (method, params) => {
      // Answered to the server as an error (the server then denies): the caller never sees it.
      if (method !== 'approval/request') throw new Error(`unsupported server request ${method}`);
      const decision = opts.onApproval ? await opts.onApproval(params as ApprovalRequest) : 'denied';
      return { decision };
    },
  });
  let timedOut: ExecServerConnectionError | undefined;
  const timer = deadline(ms - (Date.now() - started), ms, () => {
    timedOut = new ExecServerConnectionError(`no answer to initialize from ${url} within ${ms} ms`);
    // Fails the pending `initialize` at once; the catch below reports the timeout instead.
    conn.socket.terminate();
  });
  const early: Notification[] = [];
  const off = conn.onNotification((n) => {
    if (n.method !== 'session/imagePull') early.push(n);
    else {
      timer.restart();
      opts.onImagePull?.(n.params);
    }
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
    throw timedOut ?? err;
  } finally {
    timer.clear();
    off();
  }
}
