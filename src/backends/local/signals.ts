/** Signal delivery to a host process group. */
import { constants } from 'node:os';
import type { SignalName } from '../types.ts';

/** Sends `sig` to the process group led by `pid`; a group that is already gone is not an error. */
export function signalGroup(pid: number, sig: SignalName): void {
  try {
    process.kill(-pid, sig);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

export function signalNumber(name: string): number {
  return (constants.signals as Record<string, number>)[name] ?? 0;
}

/** `SIGTERM` for 15; `SIG<n>` for numbers without a name. */
export function signalName(signo: number): string {
  return Object.entries(constants.signals as Record<string, number>).find(([, n]) => n === signo)?.[0] ?? `SIG${signo}`;
}
