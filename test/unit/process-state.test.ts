/** Terminal states (src/processes/process-state.ts): how an exit is reported given why the server ended it. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isTerminal, terminalState } from '../../src/processes/process-state.ts';

test('a plain exit or signal, with no server end', () => {
  assert.deepEqual(terminalState({ kind: 'exited', code: 3 }, undefined), { status: 'exited', exitCode: 3 });
  assert.deepEqual(terminalState({ kind: 'signaled', signal: 'SIGKILL', signo: 9 }, undefined), {
    status: 'signaled',
    exitCode: 137,
    signal: 'SIGKILL',
  });
});

test('a timeout is 124 whatever the exit; a terminate keeps the signal, or says SIGTERM for a clean exit', () => {
  for (const exit of [
    { kind: 'exited', code: 0 },
    { kind: 'signaled', signal: 'SIGKILL', signo: 9 },
  ] as const)
    assert.deepEqual(terminalState(exit, 'timed-out'), { status: 'timed-out', exitCode: 124 });
  assert.deepEqual(terminalState({ kind: 'signaled', signal: 'SIGTERM', signo: 15 }, 'terminated'), {
    status: 'terminated',
    exitCode: 143,
    signal: 'SIGTERM',
  });
  assert.deepEqual(terminalState({ kind: 'exited', code: 1 }, 'terminated'), {
    status: 'terminated',
    exitCode: 1,
    signal: 'SIGTERM',
  });
});

test('lost wins over everything, with -1 and the reason', () => {
  assert.deepEqual(terminalState({ kind: 'lost', reason: 'container gone' }, 'timed-out'), {
    status: 'lost',
    exitCode: -1,
    reason: 'container gone',
  });
});

test('only starting and running are not terminal', () => {
  assert.equal(isTerminal({ status: 'starting' }), false);
  assert.equal(isTerminal({ status: 'running' }), false);
  assert.equal(isTerminal({ status: 'exited', exitCode: 0 }), true);
  assert.equal(isTerminal({ status: 'lost', exitCode: -1, reason: 'x' }), true);
});
