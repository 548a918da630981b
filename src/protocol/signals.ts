/**
 * The one signal table: the names a client may send, and the Linux numbers of every signal a
 * command can end by. Sessions run Linux (a container, or the local host's sandbox), so one
 * table serves both backends, the agent's frames and the exit records (`signal`, `signo`).
 */

/** Signals a client may send; they go to the command's whole process group. */
export const SIGNAL_NAMES = ['SIGINT', 'SIGTERM', 'SIGKILL', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'] as const;
export type SignalName = (typeof SIGNAL_NAMES)[number];

/** Linux signal numbers 1-31 by name (x86-64 and arm64 agree on these). */
export const SIGNAL_NUMBERS: Readonly<Record<string, number>> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGILL: 4,
  SIGTRAP: 5,
  SIGABRT: 6,
  SIGBUS: 7,
  SIGFPE: 8,
  SIGKILL: 9,
  SIGUSR1: 10,
  SIGSEGV: 11,
  SIGUSR2: 12,
  SIGPIPE: 13,
  SIGALRM: 14,
  SIGTERM: 15,
  SIGSTKFLT: 16,
  SIGCHLD: 17,
  SIGCONT: 18,
  SIGSTOP: 19,
  SIGTSTP: 20,
  SIGTTIN: 21,
  SIGTTOU: 22,
  SIGURG: 23,
  SIGXCPU: 24,
  SIGXFSZ: 25,
  SIGVTALRM: 26,
  SIGPROF: 27,
  SIGWINCH: 28,
  SIGIO: 29,
  SIGPWR: 30,
  SIGSYS: 31,
};

const NAME_OF: ReadonlyMap<number, string> = new Map(Object.entries(SIGNAL_NUMBERS).map(([k, v]) => [v, k]));

/** The number of signal `name` (`SIGTERM` -> 15); undefined for a name Linux does not have. */
export function signalNumber(name: string): number | undefined {
  return Object.hasOwn(SIGNAL_NUMBERS, name) ? SIGNAL_NUMBERS[name] : undefined;
}

/** The name of signal `signo` (15 -> `SIGTERM`); `SIG<n>` for a number without a name (real-time signals). */
export function signalName(signo: number): string {
  return NAME_OF.get(signo) ?? `SIG${signo}`;
}
