/**
 * One backend attempt of a process. A sandboxed attempt starts inside the early-exit window
 * (`holding`): its output is kept back until the window ends, so that an attempt that is
 * denied and retried without the sandbox never shows its output to clients. Only
 * `ManagedProcess` drives an attempt; everyone else reads it.
 */
import { StringDecoder } from 'node:string_decoder';
import type { BackendExit, BackendProcess, StreamName } from '../backends/types.ts';

/** Output an attempt keeps back while it is held, released in order or discarded. */
export interface HeldChunk {
  readonly stream: StreamName;
  readonly data: Buffer;
}

/** One backend attempt of a process: its exit, and its output while held in the early-exit window. */
export class Attempt {
  /** Resolves with the attempt's exit (after its last output, per the ProcessSink contract). */
  readonly exited: Promise<BackendExit>;
  #resolveExit!: (exit: BackendExit) => void;
  #process: BackendProcess | undefined;
  #holding: boolean;
  #discarded = false;
  #exit: BackendExit | undefined;
  #held: HeldChunk[] = [];
  #heldBytes = 0;

  constructor(holding: boolean) {
    this.#holding = holding;
    this.exited = new Promise((resolve) => (this.#resolveExit = resolve));
  }

  /** The backend process, once the spawn resolved. */
  get process(): BackendProcess | undefined {
    return this.#process;
  }

  /** Inside the early-exit window: output is held back. */
  get holding(): boolean {
    return this.#holding;
  }

  /** Classified as denied and replaced by a retry: whatever it still reports is ignored. */
  get discarded(): boolean {
    return this.#discarded;
  }

  get exit(): BackendExit | undefined {
    return this.#exit;
  }

  bind(process: BackendProcess): void {
    this.#process = process;
  }

  /** Keeps a copy of `data` (the backend reuses its buffer); returns the bytes held so far. */
  hold(stream: StreamName, data: Buffer): number {
    this.#held.push({ stream, data: Buffer.from(data) });
    this.#heldBytes += data.length;
    return this.#heldBytes;
  }

  /** Records the exit; false when one was recorded already. */
  markExited(exit: BackendExit): boolean {
    if (this.#exit) return false;
    this.#exit = exit;
    this.#resolveExit(exit);
    return true;
  }

  /** Ends the window: returns what was held, in order, for publishing. */
  stopHolding(): HeldChunk[] {
    this.#holding = false;
    const held = this.#held;
    this.#held = [];
    this.#heldBytes = 0;
    return held;
  }

  /** Drops the attempt and what it held (it is about to be retried). */
  discard(): void {
    this.stopHolding();
    this.#discarded = true;
  }

  /** Text of the held output, for the denial classifier. */
  heldText(): string {
    const decoder = new StringDecoder('utf8');
    return this.#held.map((c) => decoder.write(c.data)).join('') + decoder.end();
  }
}
