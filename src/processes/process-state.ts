/**
 * Lifecycle of a process as clients see it. `starting` covers the initial approval and the
 * spawn; every other non-`running` state is terminal and carries the exit code reported on
 * the wire (docs/protocol.md, "Notifications": signaled 128+N, timed-out 124, lost -1).
 */
export type ProcessState =
  | { readonly status: 'starting' }
  | { readonly status: 'running' }
  | TerminalState;

export type TerminalState =
  | { readonly status: 'exited'; readonly exitCode: number }
  | { readonly status: 'signaled'; readonly exitCode: number; readonly signal: string }
  | { readonly status: 'timed-out'; readonly exitCode: 124 }
  | { readonly status: 'terminated'; readonly exitCode: number; readonly signal: string }
  | { readonly status: 'lost'; readonly exitCode: -1; readonly reason: string };

export type TerminalStatus = TerminalState['status'];

export function isTerminal(state: ProcessState): state is TerminalState {
  return state.status !== 'starting' && state.status !== 'running';
}
