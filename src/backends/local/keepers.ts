/**
 * The relays a local session's commands run under (build/pty-relay, native/pty-relay.c: the
 * PTY relay, or `--pipe` for pipe mode). Each relay is a child subreaper: what its command leaves
 * running in the background (`npm run dev &`, a daemon that forked twice) is handed to it and
 * kept, and ends with the session: the relay kills everything below it on SIGTERM or when its
 * control socket closes, which also happens when the server dies, even by SIGKILL. A relay
 * whose command left nothing behind exits right after the command.
 */
import type { Duplex } from 'node:stream';
import type { BackendExit, SandboxType } from '../types.ts';
import type { OutputChannels } from './output-channels.ts';
import type { RelaySpawner } from './relay-spawner.ts';
import { signalNumber } from './signals.ts';

/** What a command is spawned with under its relay, in PTY and pipe mode alike. */
export interface RelaySpawn {
  readonly file: string;
  /** The program the client named (`file` may be a launcher: sandbox-join), for error messages. */
  readonly program?: string | undefined;
  /** `file` is build/sandbox-join, which reports a program it cannot run (pty-relay --exec-report). */
  readonly reportExec?: boolean | undefined;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env: Readonly<Record<string, string>>;
  readonly sandboxType: SandboxType;
  /** Where the relay's output is read (a plain pipe without). */
  readonly channels?: OutputChannels | undefined;
  /** The session's relays: this one joins them until it is gone. */
  readonly keepers?: Keepers | undefined;
  /** The session's relay spawner: the relay is its child rather than ours (relay-spawner.ts). */
  readonly spawner?: RelaySpawner | undefined;
}

/** A relay as its keepers see it: a `ChildProcess`, or one the session's spawner started (relay-spawner.ts). */
export interface RelayProcess {
  readonly pid?: number | undefined;
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  kill(signal?: NodeJS.Signals): boolean;
  once(event: 'exit', listener: (code: number | null, signal: NodeJS.Signals | null) => void): unknown;
}

/** How long `killAll` waits for relays to report they are gone. */
const KILL_WAIT_MS = 5_000;

/** One relay as its session keeps it. */
export interface KeptRelay {
  /** The relay's pid (every process it keeps is below it). */
  readonly pid: number | undefined;
  /** Asks the relay to end every process below it (SIGKILL) and leave. */
  kill(): void;
  /** Resolves once the relay process has exited. */
  readonly gone: Promise<void>;
}

/** A relay's handle: `kill` writes the control line, `gone` follows the process. */
export function keptRelay(relay: RelayProcess): KeptRelay {
  const gone = new Promise<void>((resolve) => {
    if (relay.exitCode !== null || relay.signalCode !== null) resolve();
    else relay.once('exit', () => resolve());
  });
  return {
    pid: relay.pid,
    gone,
    kill() {
      // Not by closing the socket (the relay would end them too): a running command is then
      // reported as killed on it first. Node sends nothing to a child it has seen exit.
      relay.kill('SIGTERM');
    },
  };
}

/** Every relay of one session that is still running (its command, or what the command left). */
export class Keepers {
  readonly #relays = new Set<KeptRelay>();

  add(relay: KeptRelay): void {
    this.#relays.add(relay);
    void relay.gone.then(() => this.#relays.delete(relay));
  }

  get size(): number {
    return this.#relays.size;
  }

  /** The pids of the relays still running. */
  pids(): number[] {
    return [...this.#relays].flatMap((r) => (r.pid === undefined ? [] : [r.pid]));
  }

  /** Ends every kept relay and what it holds; resolves when they are gone (or after a bound). */
  async killAll(): Promise<void> {
    const relays = [...this.#relays];
    for (const r of relays) r.kill();
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<void>((resolve) => (timer = setTimeout(resolve, KILL_WAIT_MS)));
    await Promise.race([Promise.all(relays.map((r) => r.gone)), bound]);
    clearTimeout(timer);
  }
}

/** Splits a relay's control socket into `word number rest` lines (`pid 12`, `exit 0`, `error 2 No such file`). */
export function onControlLines(control: Duplex, handle: (word: string, n: number, rest: string) => void): void {
  let lines = '';
  control.setEncoding('utf8').on('data', (s: string) => {
    lines += s;
    for (let nl = lines.indexOf('\n'); nl >= 0; nl = lines.indexOf('\n')) {
      const [word = '', arg = '', ...rest] = lines.slice(0, nl).split(' ');
      lines = lines.slice(nl + 1);
      handle(word, Number(arg), rest.join(' '));
    }
    // The relay's lines are short; anything longer is not from it.
    if (lines.length > 4096) lines = '';
  });
}

/**
 * The end of the relay: without a control socket its exit is the command's; with one, a relay
 * gone and its socket closed with no exit reported means the command is lost. Whatever the relay
 * reported reaches us before its control socket closes.
 */
export function watchRelayEnd(
  relay: RelayProcess,
  control: Duplex | undefined,
  on: { exited: (s: BackendExit) => void; lost: (why: string) => void; done: () => boolean },
): void {
  let relayEnd: string | undefined;
  let controlClosed = false;
  const gone = (): void => {
    if (controlClosed && relayEnd !== undefined && !on.done()) on.lost(relayEnd);
  };
  relay.once('exit', (code, signal) => {
    relayEnd = signal ? `killed by ${signal}` : `exit code ${String(code)}`;
    if (!control)
      on.exited(
        signal ? { kind: 'signaled', signal, signo: signalNumber(signal) } : { kind: 'exited', code: code ?? -1 },
      );
    gone();
  });
  control?.once('close', () => {
    controlClosed = true;
    gone();
  });
}
