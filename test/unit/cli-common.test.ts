/** The CLI's shared plumbing (src/cli/common.ts): connection defaults, usage errors, one-line errors, exit codes, pull progress. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  connectionOf,
  DEFAULT_URL,
  describeError,
  imagePullPrinter,
  parse,
  sessionOptions,
  shellExitCode,
  UsageError,
} from '../../src/cli/common.ts';
import { ExecServerHttpError } from '../../src/client/errors.ts';
import { RpcError } from '../../src/client/rpc-connection.ts';
import type { ImagePull } from '../../src/protocol/index.ts';

test('connection: flags, then the environment, then the loopback default', () => {
  assert.deepEqual(connectionOf({}, {}), { url: DEFAULT_URL, token: undefined });
  assert.deepEqual(connectionOf({}, { EXEC_SERVER_URL: 'ws://h:1', EXEC_SERVER_TOKEN: 't' }), {
    url: 'ws://h:1',
    token: 't',
  });
  assert.deepEqual(connectionOf({ url: 'ws://f:2', token: 'ft' }, { EXEC_SERVER_URL: 'ws://h:1' }), {
    url: 'ws://f:2',
    token: 'ft',
  });
});

test('parse: positionals allowed, an unknown option is a usage error', () => {
  const r = parse(['--json', 'a', 'b'], { json: { type: 'boolean' } });
  assert.deepEqual([r.values.json, r.positionals], [true, ['a', 'b']]);
  assert.throws(() => parse(['--nope'], {}), UsageError);
});

test('describeError: one readable line per kind of failure', () => {
  assert.equal(
    describeError(new ExecServerHttpError(404, 'EXEC_ERR_NOT_FOUND', 'no s1')),
    'no s1 (EXEC_ERR_NOT_FOUND, HTTP 404)',
  );
  assert.equal(describeError(new RpcError(-32600, 'bad', { code: 'EXEC_ERR_X' })), 'bad (EXEC_ERR_X)');
  assert.equal(describeError(new RpcError(-32600, 'bad', undefined)), 'bad');
  assert.match(
    describeError(Object.assign(new Error('401'), { statusCode: 401 })),
    /refused the token.*EXEC_SERVER_TOKEN/,
  );
  const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
  assert.match(describeError(refused), /^cannot connect to the server: connect ECONNREFUSED.*is it running\?/);
  assert.match(describeError(new Error('fetch failed', { cause: refused })), /^cannot connect to the server: connect/);
  assert.equal(describeError(new Error('outer', { cause: new Error('inner') })), 'outer: inner');
  assert.equal(describeError('text'), 'text');
});

test('shell exit codes stay within 0..255; lost (-1) is 255', () => {
  assert.deepEqual([0, 1, 255, 256, -1].map(shellExitCode), [0, 1, 255, 255, 255]);
});

test('pull progress: rewritten in place on a terminal; elsewhere throttled, with the last word always printed', () => {
  const out = (isTTY: boolean) => {
    const lines: string[] = [];
    return { lines, stream: { isTTY, write: (s: string) => lines.push(s) } as unknown as NodeJS.WriteStream };
  };
  const pull = (over: Partial<ImagePull>): ImagePull => ({
    image: 'img:1',
    phase: 'pulling',
    currentBytes: 5e6,
    totalBytes: 10e6,
    layers: 2,
    layersDone: 1,
    startedAt: '',
    ...over,
  });
  const tty = out(true);
  const p = imagePullPrinter(tty.stream);
  p(pull({}));
  p(pull({ phase: 'pulled', layersDone: 2, currentBytes: 10e6 }));
  assert.deepEqual(tty.lines, [
    '\r\x1b[K[exec-server] pulling image img:1: 5.0 of 10.0 MB, 1 of 2 layers',
    '\r\x1b[K[exec-server] pulled image img:1: 10.0 of 10.0 MB, 2 of 2 layers\n',
  ]);
  const pipe = out(false);
  const q = imagePullPrinter(pipe.stream);
  q(pull({ layers: 0 }));
  q(pull({}));
  q(pull({ phase: 'failed' }));
  assert.deepEqual(pipe.lines, [
    '[exec-server] pulling image img:1\n',
    '[exec-server] could not pull image img:1: 5.0 of 10.0 MB, 1 of 2 layers\n',
  ]);
});

test('sessionOptions: --image and --allow-network make the session spec; neither leaves the defaults', () => {
  assert.equal(sessionOptions(undefined, undefined), undefined);
  assert.equal(sessionOptions(undefined, []), undefined);
  assert.deepEqual(sessionOptions('img', undefined), { image: 'img' });
  assert.deepEqual(sessionOptions(undefined, ['*.github.com:443', '10.0.0.0/8']), {
    network: { allow: ['*.github.com:443', '10.0.0.0/8'] },
  });
});
