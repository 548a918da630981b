/**
 * Lifecycle of a process as clients see it. `starting` covers the initial approval and the
 * spawn; every other non-`running` state is terminal and carries the exit code reported on
 * the wire (docs/protocol.md, "Notifications": signaled 128+N, timed-out 124, lost -1).
 */
import type { BackendExit } from '../backends/types.ts';

export type ProcessState = { readonly status: 'starting' } | { readonly status: 'running' } | TerminalState;

export type TerminalState =
  | { readonly status: 'exited'; readonly exitCode: number }
  | { readonly status: 'signaled'; readonly exitCode: number; readonly signal: string }
  | { readonly status: 'timed-out'; readonly exitCode: 124 }
  | { readonly status: 'terminated'; readonly exitCode: number; readonly signal: string }
  | { readonly status: 'lost'; readonly exitCode: -1; readonly reason: string };

export type TerminalStatus = TerminalState['status'];

/** Why the server itself ended a process, if it did (a timeout, a terminate). */
export type ServerEnd = 'timed-out' | 'terminated';

/** The terminal state an exit is reported as, given whether (and why) the server ended the process. */
export function terminalState(exit: BackendExit, serverEnd: ServerEnd | undefined): TerminalState {
  if (exit.kind === 'lost') return { status: 'lost', exitCode: -1, reason: exit.reason };
  if (serverEnd === 'timed-out') return { status: 'timed-out', exitCode: 124 };
  if (exit.kind === 'signaled') {
    const exitCode = 128 + exit.signo;
    return serverEnd === 'terminated'
      ? { status: 'terminated', exitCode, signal: exit.signal }
      : { status: 'signaled', exitCode, signal: exit.signal };
  }
  if (serverEnd === 'terminated') return { status: 'terminated', exitCode: exit.code, signal: 'SIGTERM' };
  return { status: 'exited', exitCode: exit.code };
}

/** Whether the process has ended (any state but `starting` and `running`). */
export function isTerminal(state: ProcessState): state is TerminalState {
  return state.status !== 'starting' && state.status !== 'running';
}
