/**
 * The grammars, each defined once (src/config/ and src/protocol/signals.ts) and used by the CLI,
 * the environment, the config file and the engine client: engine hosts, lists, runtimes, listen
 * addresses, signals; and their errors, registry errors of code EXEC_ERR_CONFIG.
 */
import assert from 'node:assert/strict';
import { constants } from 'node:os';
import { test } from 'node:test';
import { ConfigError } from '../../src/config/config-error.ts';
import { DEFAULT_DOCKER_SOCKET, dockerHostList, MAX_ENGINES, parseDockerHost } from '../../src/config/docker-host.ts';
import { DEFAULT_LISTEN, isLoopback, listenPort, parseListen } from '../../src/config/listen.ts';
import { commaEntries, commaList } from '../../src/config/lists.ts';
import { checkRuntimeName, isRuntimeName, runtimeList, warmPoolRuntimes } from '../../src/config/runtimes.ts';
import { ExecServerError } from '../../src/errors.ts';
import { SIGNAL_NAMES, SIGNAL_NUMBERS, signalName, signalNumber } from '../../src/protocol/signals.ts';

test('a configuration error is a registry error: EXEC_ERR_CONFIG, its status, its own name', () => {
  const e = new ConfigError('--x: bad', { cause: 'why' });
  assert.ok(e instanceof ExecServerError);
  assert.deepEqual([e.code, e.statusCode, e.name, e.cause], ['EXEC_ERR_CONFIG', 500, 'ConfigError', 'why']);
  assert.match(String(e), /^ConfigError: --x: bad$/);
});

test('lists: comma-separated, trimmed; blanks kept or dropped as the caller asks', () => {
  assert.deepEqual(commaEntries(' a, b,,c '), ['a', 'b', '', 'c']);
  assert.deepEqual(commaList(' a, b,,c ,'), ['a', 'b', 'c']);
  assert.deepEqual(commaList(undefined), []);
  assert.deepEqual(commaList(''), []);
});

test("engine hosts: sockets, tcp/http/https (a port left out is the protocol's); anything else names its source", () => {
  assert.deepEqual(parseDockerHost('/run/d.sock', 'w'), { kind: 'socket', path: '/run/d.sock' });
  assert.deepEqual(parseDockerHost('unix:///run/d.sock', 'w'), { kind: 'socket', path: '/run/d.sock' });
  assert.deepEqual(parseDockerHost('tcp://h', 'w'), { kind: 'tcp', protocol: 'http', host: 'h', port: undefined });
  assert.deepEqual(parseDockerHost('http://h:1', 'w'), { kind: 'tcp', protocol: 'http', host: 'h', port: '1' });
  assert.deepEqual(parseDockerHost('https://h', 'w'), { kind: 'tcp', protocol: 'https', host: 'h', port: undefined });
  for (const bad of ['unix://', 'tcp://', 'ssh://h', 'h:2375', 'not an address'])
    assert.throws(
      () => parseDockerHost(bad, 'DOCKER_HOST'),
      (e: Error) => e instanceof ConfigError && /^DOCKER_HOST: /.test(e.message),
      bad,
    );
  assert.equal(DEFAULT_DOCKER_SOCKET, '/var/run/docker.sock');
});

test('engine host lists: every address checked, no blank, none twice, at most MAX_ENGINES', () => {
  assert.deepEqual(dockerHostList('unix:///a.sock, tcp://b:2375', 'w'), ['unix:///a.sock', 'tcp://b:2375']);
  assert.throws(() => dockerHostList('unix:///a.sock,,tcp://b', 'w'), /w: .* has an empty engine address/);
  assert.throws(() => dockerHostList('tcp://b,tcp://b', 'w'), /names an engine twice/);
  assert.throws(() => dockerHostList('tcp://b,ftp://c', 'w'), /unsupported docker host "ftp:\/\/c"/);
  const many = Array.from({ length: MAX_ENGINES + 1 }, (_, i) => `tcp://e${i}`).join(',');
  assert.throws(() => dockerHostList(many, 'w'), new RegExp(`at most ${MAX_ENGINES} engines`));
});

test('runtimes: one name grammar for --runtime, --allowed-runtimes and --warm-pool-runtimes', () => {
  for (const ok of ['runc', 'runsc', 'kata-1.0', 'io.containerd_x']) assert.ok(isRuntimeName(ok), ok);
  for (const bad of ['', '-x', 'a b', 'a=b', 'x'.repeat(129)]) assert.ok(!isRuntimeName(bad), bad);
  assert.equal(checkRuntimeName('runsc'), 'runsc');
  assert.throws(() => checkRuntimeName('a b'), /^ConfigError: --runtime: "a b" is not a runtime name/);
  assert.deepEqual(runtimeList('runc, runsc,,'), ['runc', 'runsc']);
  assert.throws(() => runtimeList('runc,a b'), /--allowed-runtimes: "a b"/);
  assert.deepEqual(warmPoolRuntimes('runsc=2, runc=0'), { runsc: 2, runc: 0 });
  for (const bad of ['runsc', 'runsc=257', 'a b=1', '=1', 'runsc=x'])
    assert.throws(() => warmPoolRuntimes(bad), /--warm-pool-runtimes: expected RUNTIME=N/, bad);
});

test('listen addresses: ws://HOST:PORT; the port for messages; the default is loopback', () => {
  assert.deepEqual(parseListen(DEFAULT_LISTEN), { host: '127.0.0.1', port: 8765 });
  assert.ok(isLoopback(parseListen(DEFAULT_LISTEN).host));
  assert.equal(listenPort('ws://[::1]:0'), 0);
  assert.equal(listenPort('ws://h:99999'), undefined);
  assert.equal(listenPort('http://h:1'), undefined);
});

test('signals: one table, the names a client may send among them, the host agrees', () => {
  for (const name of SIGNAL_NAMES) assert.equal(signalName(signalNumber(name) ?? -1), name);
  assert.deepEqual([signalNumber('SIGTERM'), signalNumber('SIGKILL'), signalNumber('NOPE')], [15, 9, undefined]);
  assert.equal(signalNumber('toString'), undefined, 'no prototype keys');
  assert.deepEqual([signalName(11), signalName(34)], ['SIGSEGV', 'SIG34']);
  // The local backend runs on Linux too: its numbers are the table's.
  for (const [name, n] of Object.entries(SIGNAL_NUMBERS))
    assert.equal((constants.signals as Record<string, number>)[name], n, name);
});
