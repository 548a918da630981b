/** What a finished command gives back (`ExecHandle.wait`, `CommandExitError.result`). */
import type { ProcessId } from '../ids.ts';

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
}
