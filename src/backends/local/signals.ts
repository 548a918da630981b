/** Signal delivery to a host process group. */
import { signalName as nameOf, signalNumber as numberOf } from '../../protocol/signals.ts';
import type { SignalName } from '../types.ts';

/** Sends `sig` to the process group led by `pid`; a group that is already gone is not an error. */
export function signalGroup(pid: number, sig: SignalName): void {
  try {
    process.kill(-pid, sig);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

/** The number of `name` from the one signal table (src/protocol/signals.ts); 0 for an unknown name. */
export function signalNumber(name: string): number {
  return numberOf(name) ?? 0;
}

/** `SIGTERM` for 15; `SIG<n>` for numbers without a name. */
export function signalName(signo: number): string {
  return nameOf(signo);
}
