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
