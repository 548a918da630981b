/** Host signals (src/backends/local/signals.ts): names and numbers, and a gone group is no error. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { signalGroup, signalName, signalNumber } from '../../src/backends/local/signals.ts';

test('names and numbers map both ways; unknown ones get 0 and SIG<n>', () => {
  assert.equal(signalNumber('SIGTERM'), 15);
  assert.equal(signalNumber('SIGKILL'), 9);
  assert.equal(signalNumber('NOPE'), 0);
  assert.equal(signalName(15), 'SIGTERM');
  assert.equal(signalName(9), 'SIGKILL');
  assert.equal(signalName(200), 'SIG200');
});

test('signalGroup ends a real process group, then signalling it again is quiet', async () => {
  const child = spawn('sleep', ['30'], { detached: true, stdio: 'ignore' });
  const exited = once(child, 'exit');
  signalGroup(child.pid as number, 'SIGTERM');
  const [, signal] = await exited;
  assert.equal(signal, 'SIGTERM');
  signalGroup(child.pid as number, 'SIGTERM');
});
