/** Ending a command's input (src/backends/stdin.ts): Ctrl-D to a terminal, a close for a pipe. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { endInput, PTY_EOF } from '../../src/backends/stdin.ts';

test('a PTY gets the EOF character; pipes are closed, never written', async () => {
  for (const mode of ['pty', 'pipe', 'pipe-no-stdin'] as const) {
    const written: Buffer[] = [];
    let closed = 0;
    await endInput(
      mode,
      async (d) => {
        written.push(d);
      },
      () => {
        closed += 1;
      },
    );
    if (mode === 'pty') assert.deepEqual([written, closed], [[PTY_EOF], 0]);
    else assert.deepEqual([written, closed], [[], 1]);
  }
  assert.deepEqual([...PTY_EOF], [4]);
});
