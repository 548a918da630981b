/**
 * Per-connection state: the initialize/initialized lifecycle, the session the connection is
 * attached to, and the forwarding of that session's process events as notifications.
 */
import type { Config } from '../config.ts';
import { execError, type ExecServerError } from '../errors.ts';
import type { TenantId } from '../ids.ts';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import type { NotificationName, NotificationParams, ProcessNotification } from '../protocol/index.ts';
import type { ManagedProcess } from '../processes/managed-process.ts';
import type { LogEvent } from '../processes/output-log.ts';
import type { Session, SessionClient } from '../sessions/session.ts';
import type { SessionManager } from '../sessions/session-manager.ts';
import type { RpcPeer } from './rpc-peer.ts';
import { type Principal, scopeProblem, type TokenScope } from '../sessions/token-scope.ts';

/** JSON-RPC methods a `read` token may call: attach, replay output, read files, describe. */
export const READ_METHODS: ReadonlySet<string> = new Set([
  'initialize',
  'environment/info',
  'environmentConfig/read',
  'session/info',
  'process/read',
  'process/list',
  'fs/readFile',
  'fs/getMetadata',
  'fs/canonicalize',
  'fs/readDirectory',
  'fs/open',
  'fs/readBlock',
  'fs/close',
  'fs/watchMissing',
  'fs/unwatch',
]);

/** What a connection takes from the server: sessions, configuration, metrics, logs, and its caller. */
export interface ConnectionDeps {
  readonly sessions: SessionManager;
  readonly config: Config;
  readonly metrics: Metrics;
  readonly log: Logger;
  readonly tenant: TenantId;
  /** Who authenticated the connection; a session token's scope limits what it may do. */
  readonly principal?: Principal | undefined;
  readonly version: string;
}

type Lifecycle = 'new' | 'initializing' | 'awaiting-initialized' | 'ready';

/** setTimeout's longest delay; a token may last 30 days. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Runs `fn` at `atMs` (epoch ms), never synchronously, on an unref'd timer; returns its cancel. */
function atExpiry(atMs: number, fn: () => void): () => void {
  let timer: NodeJS.Timeout | undefined;
  const arm = (): void => {
    timer = setTimeout(
      () => (Date.now() >= atMs ? fn() : arm()),
      Math.max(0, Math.min(atMs - Date.now(), MAX_TIMER_MS)),
    );
    timer.unref();
  };
  arm();
  return () => clearTimeout(timer);
}

/** Wire form of one log event as a notification. */
export function toNotification(proc: ManagedProcess, event: LogEvent): ProcessNotification {
  const processId = proc.id;
  switch (event.kind) {
    case 'output':
      return {
        method: 'process/output',
        params: { processId, seq: event.seq, stream: event.stream, chunk: event.data.toString('base64') },
      };
    case 'escalated':
      return { method: 'process/escalated', params: { processId, seq: event.seq, reason: event.reason } };
    case 'exited': {
      const s = event.state;
      return {
        method: 'process/exited',
        params: {
          processId,
          seq: event.seq,
          exitCode: s.exitCode,
          terminal: s.status,
          ...('signal' in s ? { signal: s.signal } : {}),
          sandboxDenied: event.sandboxDenied,
        },
      };
    }
    case 'closed':
      return { method: 'process/closed', params: { processId, seq: event.seq } };
  }
}

/** One client's WebSocket JSON-RPC connection: lifecycle gate, attached session, notifications, flow control. */
export class Connection implements SessionClient {
  readonly deps: ConnectionDeps;
  clientName = 'unknown';
  #lifecycle: Lifecycle = 'new';
  #session: Session | undefined;
  #unsubscribe: (() => void) | undefined;
  #peer: RpcPeer<Connection> | undefined;
  readonly #close: (code: number, reason: string) => void;
  #outputPaused = false;
  #stallTimer: NodeJS.Timeout | undefined;
  #onStall: (() => void) | undefined;
  /** An observer (initialize `observe`) follows the session without being its client. */
  #observer = false;
  #offDestroy: (() => void) | undefined;
  /** `initialized` arrived while `initialize` still ran (sent right behind it): counted once it succeeds. */
  #initializedEarly = false;

  constructor(deps: ConnectionDeps, close: (code: number, reason: string) => void) {
    this.deps = deps;
    this.#close = close;
  }

  bindPeer(peer: RpcPeer<Connection>): void {
    this.#peer = peer;
  }

  /** What to do when the client stays behind past `--ws-stall-timeout-ms` (the transport disconnects it). */
  onStall(handler: () => void): void {
    this.#onStall = handler;
  }

  /**
   * Flow control, called with the socket's unread byte count after each send and each flush:
   * above a quarter of `--ws-buffer-limit-bytes` the session's commands wait (their output is
   * not read); below a sixteenth they go on. A client that stays behind is cut by `onStall`.
   */
  flowCheck(buffered: number): void {
    const session = this.#session;
    // An observer never makes the session's commands wait: when it stays behind, the transport
    // cuts it at the buffer limit and it resumes from its last seq.
    if (!session || this.#observer) return;
    const limit = this.deps.config.wsBufferLimitBytes;
    if (!this.#outputPaused && buffered > limit / 4) {
      this.#outputPaused = true;
      session.processes.setOutputPaused(true);
      this.#stallTimer = setTimeout(() => this.#onStall?.(), this.deps.config.wsStallTimeoutMs);
      this.#stallTimer.unref();
    } else if (this.#outputPaused && buffered <= limit / 16) {
      this.#resumeOutput();
    }
  }

  #resumeOutput(): void {
    if (!this.#outputPaused) return;
    this.#outputPaused = false;
    clearTimeout(this.#stallTimer);
    this.#session?.processes.setOutputPaused(false);
  }

  /** Throws when `method` may not run in the current lifecycle state, or not with this connection's token. */
  gate(method: string, requires: 'none' | 'initialized'): void {
    const scope = this.deps.principal?.scope;
    if (scope !== undefined) {
      const problem =
        scopeProblem(scope, { findSession: (id) => this.deps.sessions.find(id) }) ??
        (scope.access === 'read' && !READ_METHODS.has(method)
          ? execError('EXEC_ERR_TOKEN_READ_ONLY', `a read token cannot call ${method}`)
          : undefined);
      if (problem) throw this.#refused(scope, method, problem);
    }
    if (requires === 'none') {
      if (this.#lifecycle !== 'new')
        throw execError('EXEC_ERR_ALREADY_INITIALIZED', 'initialize may only be sent once per connection');
      return;
    }
    const area = method.split('/')[0] ?? method;
    if (this.#lifecycle === 'new' || this.#lifecycle === 'initializing')
      throw execError('EXEC_ERR_NOT_INITIALIZED', `client must call initialize before using ${area} methods`);
    if (this.#lifecycle === 'awaiting-initialized')
      throw execError('EXEC_ERR_NOT_INITIALIZED', `client must send initialized before using ${area} methods`);
  }

  /** A session token's refusal, recorded as the HTTP hook records its own (auth-hook.ts). */
  #refused(scope: TokenScope, method: string, e: ExecServerError): ExecServerError {
    this.deps.sessions.audit.record({
      action: e.statusCode === 401 ? 'auth.failure' : 'auth.denied',
      tenant: scope.tenant,
      session: scope.sessionId,
      detail: { method, code: e.code, reason: e.message },
    });
    return e;
  }

  onNotification(method: string, _params: unknown): void {
    if (method === 'initialized') {
      if (this.#lifecycle === 'awaiting-initialized') this.#lifecycle = 'ready';
      // Dropped, it would leave the connection waiting for a notification its client did send.
      else if (this.#lifecycle === 'initializing') this.#initializedEarly = true;
      return;
    }
    this.deps.log.debug({ method }, 'ignoring unknown client notification');
  }

  beginInitialize(): void {
    this.#lifecycle = 'initializing';
  }

  /** initialize failed (e.g. unknown resume id): the client may try again. */
  resetInitialize(): void {
    this.#lifecycle = 'new';
    this.#initializedEarly = false;
  }

  /**
   * Attaches to `session`: as its client (a previous client is evicted, approvals come here),
   * or as an observer that only follows its processes (the console): nobody is evicted, and
   * the observer is closed when the session is deleted.
   */
  attach(session: Session, role: 'client' | 'observer' = 'client'): void {
    // First, so that a refused observer leaves the connection as it was (initialize fails).
    const releaseObserver = role === 'observer' ? session.addObserver() : undefined;
    this.#session = session;
    this.#observer = role === 'observer';
    const scope = this.deps.principal?.scope;
    if (scope !== undefined) {
      // A revoked or expired token's connection ends then, not at its next call: until its next
      // call it would still receive output and approval requests.
      const off = session.tokens.onRevoke((revoked) => {
        if (revoked === scope.tokenId) this.evict('session token revoked');
      });
      const stop = atExpiry(scope.expiresAt * 1000, () => this.evict('session token expired'));
      const prev = this.#offDestroy;
      this.#offDestroy = () => {
        off();
        stop();
        prev?.();
      };
    }
    if (this.#observer) {
      const off = session.onDestroy(() => this.evict('session was deleted'));
      const prev = this.#offDestroy;
      this.#offDestroy = () => {
        off();
        releaseObserver?.();
        prev?.();
      };
    } else session.attach(this);
    this.#unsubscribe = session.processes.subscribe((proc, event) => {
      if (event.kind === 'output') {
        this.#peer?.notifyOutput(proc.id, event.seq, event.stream, event.data);
        return;
      }
      const n = toNotification(proc, event);
      this.#peer?.notify(n.method, n.params);
    });
    this.#lifecycle = this.#initializedEarly ? 'ready' : 'awaiting-initialized';
    // The socket closed while the session was being made (closed() found nothing to detach):
    // attached to a dead connection, the session would never count as idle.
    if (this.#peer === undefined || this.#peer.closed) this.#detach();
  }

  /** What this connection's token may do: `read` for a read-only session token. */
  get principalAccess(): 'full' | 'read' {
    return this.deps.principal?.scope?.access ?? 'full';
  }

  /** Whose file handles this connection uses (src/sessions/files/file-handles.ts): its principal. */
  get owner(): string {
    return this.deps.principal?.name ?? `tenant:${this.deps.tenant}`;
  }

  get session(): Session {
    if (!this.#session) throw execError('EXEC_ERR_NOT_INITIALIZED', 'connection has no session');
    // Watching is not activity: an observer polling a session does not keep it from idling out.
    if (!this.#observer) this.#session.touch();
    return this.#session;
  }

  request(method: string, params: unknown, timeoutMs: number): Promise<unknown> {
    if (!this.#peer) return Promise.reject(execError('EXEC_ERR_REJECTED', 'not connected'));
    return this.#peer.request(method, params, timeoutMs);
  }

  /** Sends a notification to this client; false when the connection is closed or detached. */
  notify<N extends NotificationName>(method: N, params: NotificationParams<N>): boolean {
    if (!this.#session || !this.#peer || this.#peer.closed) return false;
    this.#peer.notify(method, params);
    return true;
  }

  /**
   * A notification about the `initialize` in flight (the pull of its session's image), sent
   * before any session is attached; dropped once the connection closed or `initialize` ended.
   */
  notifyInitializing<N extends NotificationName>(method: N, params: NotificationParams<N>): void {
    if (this.#lifecycle !== 'initializing' || !this.#peer || this.#peer.closed) return;
    this.#peer.notify(method, params);
  }

  evict(reason: string): void {
    this.#detach();
    this.#close(4000, reason);
  }

  #detach(): void {
    // Without a client nobody is behind: output is drained again.
    this.#resumeOutput();
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
    this.#offDestroy?.();
    this.#offDestroy = undefined;
    this.#peer?.close();
    const session = this.#session;
    this.#session = undefined;
    session?.detach(this);
  }

  /** The socket closed: detach (processes keep running). */
  closed(): void {
    this.#detach();
  }
}
