/** Ending a command's input (src/backends/stdin.ts): Ctrl-D to a terminal, a close for a pipe. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CommandInput, endInput, PTY_EOF } from '../../src/backends/stdin.ts';

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

test('CommandInput: a pipe closes once, a PTY gets EOF and stays open, nothing after the end', async () => {
  const closes: string[] = [];
  const writes: Buffer[] = [];
  const write = async (d: Buffer) => {
    writes.push(d);
  };
  const pipe = new CommandInput('pipe');
  assert.equal(pipe.open, true);
  await pipe.end(write, () => closes.push('pipe'));
  await pipe.end(write, () => closes.push('pipe again'));
  assert.deepEqual([pipe.open, closes, writes], [false, ['pipe'], []]);

  const pty = new CommandInput('pty');
  await pty.end(write, () => closes.push('pty'));
  assert.deepEqual([pty.open, writes], [true, [PTY_EOF]]);
  pty.shut();
  await pty.end(write, () => closes.push('pty'));
  assert.deepEqual([pty.open, writes.length, closes], [false, 1, ['pipe']]);

  const none = new CommandInput('pipe-no-stdin');
  await none.end(write, () => closes.push('none'));
  assert.deepEqual([none.open, closes], [false, ['pipe']]);
});
