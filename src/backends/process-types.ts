import type { SignalName, StreamName } from '../protocol/index.ts';

/** Sandbox mechanism of an attempt, as reported to clients (`sandboxType`). */
export type SandboxType = 'none' | 'bubblewrap' | 'container-user';

/**
 * A sandbox as the backend must enforce it for one attempt, already resolved from the
 * session policy (paths absolute, inside the session's filesystem).
 * `unrestricted`: no sandbox at all (sandbox type `none`).
 * `restricted`: the whole filesystem readable except `denyRead`; only `writableRoots` writable
 * (empty for `read-only`); network only when `network` is true.
 */
export type ResolvedSandbox =
  | { readonly kind: 'unrestricted' }
  | {
      readonly kind: 'restricted';
      readonly writableRoots: readonly string[];
      readonly denyRead: readonly string[];
      readonly network: boolean;
    };

/** How the process's stdio is wired. */
export type SpawnMode = 'pty' | 'pipe' | 'pipe-no-stdin';

/** A terminal's size in character cells (PTY mode; pipe mode ignores it). */
export interface TerminalSize {
  readonly cols: number;
  readonly rows: number;
}

/** One attempt of a command as the engine hands it to a backend: everything resolved, nothing left to decide. */
export interface SpawnRequest {
  readonly argv: readonly string[];
  /** Replaces argv[0] as seen by the program (the executable is still argv[0]). */
  readonly arg0?: string | undefined;
  /** Absolute path inside the session's filesystem. */
  readonly cwd: string;
  /** The complete environment (already built from envPolicy + env by the engine). */
  readonly env: Readonly<Record<string, string>>;
  readonly mode: SpawnMode;
  readonly size: TerminalSize;
  readonly sandbox: ResolvedSandbox;
  /**
   * Opaque to the backend: what the engine needs to re-adopt this process after a server
   * restart. Backends whose processes survive the server keep it and hand it back from
   * `recover()`; others ignore it.
   */
  readonly recoveryTag?: string | undefined;
}

/** How a backend process ended. `lost`: the backend cannot tell (container gone, engine lost). */
export type BackendExit =
  | { readonly kind: 'exited'; readonly code: number }
  | { readonly kind: 'signaled'; readonly signal: string; readonly signo: number }
  | { readonly kind: 'lost'; readonly reason: string };

/**
 * Where a backend delivers what a process does. Passed to `spawn` so nothing can be emitted
 * before a listener exists. Contract: `output` is called in order; `exit` is called exactly
 * once and only after the last `output` (backends must guard against output-after-exit).
 * The sink never applies backpressure: the engine always drains. `output` copies what it keeps
 * before it returns, so a backend may reuse `data`'s memory for its next read.
 */
export interface ProcessSink {
  output(stream: StreamName, data: Buffer): void;
  exit(result: BackendExit): void;
}

/** A running process as the backend sees it. All methods are safe to call after exit. */
export interface BackendProcess {
  /** Sandbox mechanism this attempt really runs under. */
  readonly sandboxType: SandboxType;
  write(data: Buffer): Promise<void>;
  /**
   * Optional, where `write` refuses what would pass the command's unread-stdin budget
   * (EXEC_ERR_TOO_LARGE): resolves once `bytes` more fit (or the command ended). A writer that
   * streams (a port relay, an egress tunnel: process-stream.ts) awaits it before each write, so
   * a fast source waits for the command instead of failing.
   */
  stdinRoom?(bytes: number): Promise<void>;
  closeStdin(): Promise<void>;
  resize(size: TerminalSize): Promise<void>;
  /** Delivers `signal` to the command's whole process group. */
  signal(signal: SignalName): Promise<void>;
  /**
   * Stops reading the process's output (it blocks once its pipe or terminal buffer is full)
   * until `resumeOutput`. Used only while an attached client is behind; idempotent.
   */
  pauseOutput(): void;
  resumeOutput(): void;
  /**
   * Optional: the engine published this process's output through byte `endOffset` (counted
   * over everything the backend gave the sink) as the log event `seq`. Backends whose
   * processes survive the server keep these marks to rebuild the same seqs after a restart.
   */
  acknowledge?(seq: number, endOffset: number): void;
  /** Optional: the engine no longer needs the process (pruned); the backend may drop its record. */
  dispose?(): void;
}

/** A process a recovered session still has (its backend kept it running, or its exit). */
export interface RecoveredProcess {
  /** What `SpawnRequest.recoveryTag` carried. */
  readonly tag: string;
  /**
   * Output the backend kept, oldest first. `seq`: the log event the previous server published
   * the chunk as (`BackendProcess.acknowledge`); absent for output it never published.
   */
  readonly chunks: ReadonlyArray<{
    readonly stream: StreamName;
    readonly data: Buffer;
    readonly seq?: number | undefined;
  }>;
  /** Output dropped before the first chunk (past the backend's retention). */
  readonly droppedBytes: number;
  /** Offset after the last chunk, counted like `acknowledge`'s. */
  readonly endOffset: number;
  /** The sandbox mechanism the attempt ran under. */
  readonly sandboxType: SandboxType;
  /**
   * True when the backend kept no record of what the previous server published (docker's exec
   * path): the seqs it numbered are unknown, so the next ones must lie past any it could have used.
   */
  readonly seqsUnknown?: boolean | undefined;
}
