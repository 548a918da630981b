/** What a finished command gives back (`ExecHandle.wait`, `CommandExitError.result`). */
import type { ProcessId } from '../ids.ts';

/** A finished command: how it ended and its decoded output (empty when not collected). */
export interface ExecResult {
  readonly processId: ProcessId;
  readonly argv: readonly string[];
  readonly exitCode: number;
  /** `exited`, `signaled`, `timed-out`, `terminated` or `lost`. */
  readonly terminal: string;
  readonly signal?: string | undefined;
  readonly sandboxDenied: boolean;
  readonly stdout: string;
  readonly stderr: string;
  /** PTY output (tty processes). */
  readonly pty: string;
  /**
   * Bytes of output that never arrived: after a drop, the server no longer retained them
   * (`--output-retention-bytes`, oldest first) when the SDK read the gap. 0 normally; after
   * `attach` with an `afterSeq`, dropped output at or before it can count too.
   */
  readonly droppedBytes: number;
}
