/** What `serve` prints when it cannot start (src/cli/boot-errors.ts): one line, the cause, the fix, the exit code. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { describeBootError } from '../../src/cli/boot-errors.ts';
import { ConfigError } from '../../src/config.ts';
import { execError } from '../../src/errors.ts';

const ctx = { listen: 'ws://127.0.0.1:8765', dockerHost: undefined };
const errno = (code: string) => Object.assign(new Error(`listen ${code}`), { code });

test('listen failures name the address, the port and how to choose another', () => {
  const inUse = describeBootError(errno('EADDRINUSE'), ctx);
  assert.equal(inUse.exitCode, 2);
  assert.match(inUse.message, /^cannot listen on ws:\/\/127\.0\.0\.1:8765: port 8765 is already in use/);
  assert.match(inUse.message, /--listen ws:\/\/127\.0\.0\.1:PORT \(port 0 picks a free one\)$/);
  assert.match(describeBootError(errno('EACCES'), ctx).message, /permission denied \(ports below 1024/);
  assert.match(describeBootError(errno('EADDRNOTAVAIL'), ctx).message, /not an address of this machine/);
  for (const code of ['ENOTFOUND', 'EAI_AGAIN']) {
    const f = describeBootError(errno(code), { ...ctx, listen: 'ws://nowhere.invalid:9' });
    assert.deepEqual([f.exitCode, /host name does not resolve/.test(f.message)], [2, true], code);
  }
  assert.match(describeBootError(errno('EADDRINUSE'), { ...ctx, listen: 'ws://[::1]:7/' }).message, /port 7 /);
  assert.match(describeBootError(errno('EADDRINUSE'), { ...ctx, listen: 'odd' }).message, /port PORT /);
});

test('configuration errors, of either kind, exit 2 as invalid configuration', () => {
  assert.deepEqual(describeBootError(new ConfigError('--max-processes: expected an integer'), ctx), {
    message: 'invalid configuration: --max-processes: expected an integer',
    exitCode: 2,
  });
  assert.deepEqual(describeBootError(execError('EXEC_ERR_CONFIG', 'runtime x missing'), ctx), {
    message: 'invalid configuration: runtime x missing',
    exitCode: 2,
  });
});

test('no engine names the address used (the default socket when none is set) and three ways out', () => {
  const down = execError('EXEC_ERR_BACKEND_UNAVAILABLE', 'connect ENOENT');
  const d = describeBootError(down, ctx);
  assert.equal(d.exitCode, 2);
  assert.match(d.message, /^no Docker engine answers at unix:\/\/\/var\/run\/docker\.sock \(connect ENOENT\)/);
  assert.match(d.message, /--docker-host or DOCKER_HOST.*--backend local$/);
  assert.match(describeBootError(down, { ...ctx, dockerHost: 'tcp://e:2375' }).message, /answers at tcp:\/\/e:2375 /);
  const inUse = execError('EXEC_ERR_INSTANCE_IN_USE', 'instance x is held by pid 9');
  assert.deepEqual(describeBootError(inUse, ctx), { message: 'instance x is held by pid 9', exitCode: 2 });
});

test('anything else is a bug: exit 1, still one line, pointing at the debug log', () => {
  assert.deepEqual(describeBootError(new TypeError('x is not a function'), ctx), {
    message: 'cannot start: x is not a function (run with --log-level debug for details)',
    exitCode: 1,
  });
  assert.equal(
    describeBootError('a string', ctx).message,
    'cannot start: a string (run with --log-level debug for details)',
  );
  assert.equal(describeBootError(execError('EXEC_ERR_INTERNAL', 'boom'), ctx).exitCode, 1);
  assert.equal(describeBootError(undefined, ctx).exitCode, 1);
});
