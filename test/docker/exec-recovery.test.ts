/**
 * Unit test of how a restarted server reads the engine's record of a wrapper exec
 * (src/backends/docker/exec/exec-recovery.ts): the recovery tag survives the trip through the
 * wrapper's arguments, control scripts are not commands, a command without a tag (or of another
 * wrapper version) is still recognised so it can be killed. The engine path is
 * test/docker/restart.test.ts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseWrapperExec, tagArguments } from '../../src/backends/docker/exec/exec-recovery.ts';
import { ROOT_PID_DIR, SIGNAL_SCRIPT, USER_PID_DIR, WRAPPER_SCRIPT } from '../../src/backends/docker/exec/scripts.ts';

const PID = `${ROOT_PID_DIR}/0b7f3c9e-2a51-4c0e-9d8e-1f2a3b4c5d6e`;

function wrapperArgs(pidFile: string, tag: string | undefined, argv: string[]): string[] {
  return ['-c', WRAPPER_SCRIPT, 'sh', pidFile, '/workspace', '', '', '', ...tagArguments(tag), ...argv];
}

test('a tag, short or split into pieces, comes back from the wrapper arguments', () => {
  for (const tag of ['{"v":1,"processId":"p1"}', `{"argv":["${'é'.repeat(60_000)}"]}`]) {
    const got = parseWrapperExec({
      entrypoint: '/bin/sh',
      arguments: wrapperArgs(PID, tag, ['sleep', '9']),
      user: '0:0',
    });
    assert.deepEqual(got, { pidFile: PID, user: '0:0', tag });
  }
  assert.ok(tagArguments('x'.repeat(200_000)).length > 2, 'a 200 kB tag is carried in pieces');
  for (const piece of tagArguments('x'.repeat(200_000)).slice(1))
    assert.ok(piece.length < 128 * 1024, 'each piece under the kernel limit of one argument');
});

test('a tag too large to carry, or none, still leaves the command recognisable (to be killed)', () => {
  assert.deepEqual(tagArguments('x'.repeat(400_000)), ['0']);
  assert.deepEqual(tagArguments(undefined), ['0']);
  const user = `${USER_PID_DIR}/0b7f3c9e-2a51-4c0e-9d8e-1f2a3b4c5d6e`;
  assert.deepEqual(
    parseWrapperExec({ entrypoint: '/bin/sh', arguments: wrapperArgs(user, undefined, ['true']), user: '1000:1000' }),
    { pidFile: user, user: '1000:1000', tag: undefined },
  );
  // The previous wrapper layout (no tag arguments): recognised, no tag read from its argv.
  assert.deepEqual(
    parseWrapperExec({
      entrypoint: '/bin/sh',
      arguments: ['-c', 'echo $$ >"$1"; shift 5; exec "$@"', 'sh', PID, '/w', '', '', '', '2', 'a', 'b'],
    }),
    { pidFile: PID, user: '0:0', tag: undefined },
  );
});

test('control scripts and foreign execs are not commands', () => {
  assert.equal(
    parseWrapperExec({ entrypoint: '/bin/sh', arguments: ['-c', SIGNAL_SCRIPT, 'sh', PID, 'KILL'], user: '0:0' }),
    undefined,
  );
  assert.equal(parseWrapperExec({ entrypoint: '/bin/sh', arguments: ['-c', 'sleep 5'] }), undefined);
  assert.equal(
    parseWrapperExec({ entrypoint: '/bin/sh', arguments: ['-c', WRAPPER_SCRIPT, 'sh', '/tmp/not-a-pid-file'] }),
    undefined,
  );
  assert.equal(parseWrapperExec({ entrypoint: '/.exec-server/exec-agent', arguments: ['attach', PID] }), undefined);
});
