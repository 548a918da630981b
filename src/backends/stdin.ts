/**
 * Closing a command's stdin, the same on every backend: a terminal has no separate end of its
 * input, so a PTY command gets the EOF character, as when a user presses Ctrl-D (its line
 * discipline then ends the read); a pipe is closed by its transport.
 */
import type { SpawnMode } from './types.ts';

/** The terminal's EOF character (Ctrl-D). */
export const PTY_EOF = Buffer.from([4]);

/** Ends a command's input: `write` sends the EOF character to a PTY, `closePipe` closes a pipe. */
export async function endInput(
  mode: SpawnMode,
  write: (data: Buffer) => Promise<void>,
  closePipe: () => void,
): Promise<void> {
  if (mode === 'pty') await write(PTY_EOF);
  else closePipe();
}

/**
 * A command's stdin as a process of the docker backend keeps it (agent and exec paths): open
 * from the start unless the command has none (`pipe-no-stdin`), until the client closes it or
 * the command ends.
 */
export class CommandInput {
  readonly #mode: SpawnMode;
  #closed: boolean;

  constructor(mode: SpawnMode) {
    this.#mode = mode;
    this.#closed = mode === 'pipe-no-stdin';
  }

  /** Whether the command may still be sent input. */
  get open(): boolean {
    return !this.#closed;
  }

  /** The command ended: its input went with it. */
  shut(): void {
    this.#closed = true;
  }

  /**
   * Ends the input once (`endInput`): a PTY gets the EOF character through `write` and stays
   * open (the terminal lives on); a pipe counts as closed before `closePipe` closes it.
   */
  async end(write: (data: Buffer) => Promise<void>, closePipe: () => void): Promise<void> {
    if (this.#closed) return;
    await endInput(this.#mode, write, () => {
      this.#closed = true;
      closePipe();
    });
  }
}
