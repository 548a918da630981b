/** Engine calls (src/backends/docker/engine/engine-client.ts): which failures mean "unreachable", their mapping, deadlines, host grammar. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  createDockerClient,
  engineError,
  isUnreachable,
  statusOf,
  withDeadline,
} from '../../src/backends/docker/engine/engine-client.ts';
import { execError } from '../../src/errors.ts';

const modem = (statusCode: number, message: string) =>
  Object.assign(new Error('HTTP'), { statusCode, json: { message } });

test('unreachable: transport codes, aborts and hang-ups; never an API answer', () => {
  for (const code of ['ECONNREFUSED', 'ENOENT', 'ETIMEDOUT', 'ERR_STREAM_PREMATURE_CLOSE'])
    assert.equal(isUnreachable(Object.assign(new Error(code), { code })), true, code);
  assert.equal(isUnreachable(Object.assign(new Error('x'), { name: 'AbortError' })), true);
  assert.equal(isUnreachable(new Error('socket hang up')), true);
  assert.equal(isUnreachable(Object.assign(new Error('x'), { code: 'ECONNREFUSED', statusCode: 500 })), false);
  assert.equal(isUnreachable(new Error('no such image')), false);
  assert.equal(isUnreachable(undefined), false);
  assert.equal(isUnreachable(execError('EXEC_ERR_BACKEND_UNAVAILABLE', 'x')), true);
  assert.equal(isUnreachable(execError('EXEC_ERR_BACKEND', 'x')), false);
  assert.equal(statusOf(modem(409, 'conflict')), 409);
  assert.equal(statusOf(new Error('x')), undefined);
});

test('engineError: unavailable, not found (404) or backend, with the operation and the engine message', () => {
  const down = engineError(Object.assign(new Error('connect'), { code: 'ECONNREFUSED' }), 'create container');
  assert.deepEqual(
    [down.code, down.message],
    ['EXEC_ERR_BACKEND_UNAVAILABLE', 'docker engine unavailable (create container): ECONNREFUSED'],
  );
  const named = engineError(
    Object.assign(new Error('connect ENOENT /run/b.sock'), { code: 'ENOENT', address: '/run/b.sock' }),
    'commit',
  );
  assert.equal(named.message, 'docker engine unavailable (commit): ENOENT at /run/b.sock', 'the engine is named');
  const tcp = engineError(
    Object.assign(new Error('x'), { code: 'ECONNREFUSED', address: '10.0.0.2', port: 2375 }),
    'ps',
  );
  assert.equal(tcp.message, 'docker engine unavailable (ps): ECONNREFUSED at 10.0.0.2:2375');
  const missing = engineError(modem(404, 'No such container: abc'), 'inspect');
  assert.deepEqual([missing.code, missing.message], ['EXEC_ERR_NOT_FOUND', 'inspect: No such container: abc']);
  const refused = engineError(modem(500, 'driver failed'), 'start');
  assert.deepEqual([refused.code, refused.message], ['EXEC_ERR_BACKEND', 'start: driver failed']);
  const ours = execError('EXEC_ERR_DISK_LIMIT', 'full');
  assert.equal(engineError(ours, 'x'), ours);
});

test('withDeadline: the answer in time, a mapped failure, or unavailable at the deadline with the call aborted', async () => {
  assert.equal(await withDeadline('ping', 1000, async () => 'OK'), 'OK');
  await assert.rejects(
    withDeadline('inspect', 1000, async () => {
      throw modem(404, 'gone');
    }),
    { code: 'EXEC_ERR_NOT_FOUND', message: 'inspect: gone' },
  );
  let aborted = false;
  await assert.rejects(
    withDeadline(
      'stats',
      20,
      (signal) =>
        new Promise((_, reject) => {
          // Like an HTTP request: the abort fails it on a later turn of the loop.
          signal.addEventListener('abort', () => {
            aborted = true;
            setImmediate(() => reject(Object.assign(new Error('aborted'), { name: 'AbortError' })));
          });
        }),
    ),
    { code: 'EXEC_ERR_BACKEND_UNAVAILABLE', message: 'docker engine did not answer within 20 ms (stats)' },
  );
  assert.equal(aborted, true);
});

test('createDockerClient: unix, tcp and https hosts; anything else is a config error', () => {
  const opts = (h: string | undefined) =>
    (createDockerClient(h) as unknown as { modem: Record<string, unknown> }).modem;
  assert.equal(opts('unix:///tmp/d.sock')['socketPath'], '/tmp/d.sock');
  assert.deepEqual(
    [opts('tcp://10.0.0.1:2375')['host'], String(opts('tcp://10.0.0.1:2375')['port'])],
    ['10.0.0.1', '2375'],
  );
  assert.equal(opts('https://e.example')['protocol'], 'https');
  assert.throws(() => createDockerClient('ftp://x'), {
    code: 'EXEC_ERR_CONFIG',
    message: /unsupported docker host ftp:\/\/x/,
  });
});
