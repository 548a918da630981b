import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  ConfigError,
  checkDockerHost,
  helpText,
  hostDirsFor,
  isLoopback,
  loadConfig,
  markdownTable,
  parseListen,
  redactSecretFlags,
  runtimeList,
  warmPoolRuntimes,
  warmPoolTemplates,
} from '../../src/config.ts';

test('defaults: local backend on loopback, Codex-compatible limits', () => {
  const c = loadConfig([], {});
  assert.equal(c.backend, 'local');
  assert.equal(c.listen, 'ws://127.0.0.1:8765');
  assert.equal(c.maxProcesses, 64);
  assert.equal(c.outputRetentionBytes, 1024 * 1024);
  assert.equal(c.exitedRetentionMs, 600_000);
  assert.equal(c.sandbox, 'workspace-write');
  assert.equal(c.approvalPolicy, 'on-request');
});

test('flags win over variables; CODEX_EXEC_SERVER_CONNECTION_TOKEN is accepted', () => {
  const c = loadConfig(['--max-processes', '8'], {
    EXEC_SERVER_MAX_PROCESSES: '9',
    CODEX_EXEC_SERVER_CONNECTION_TOKEN: 'tok',
  });
  assert.equal(c.maxProcesses, 8);
  assert.equal(c.token, 'tok');
});

test('each bad value gets a clear message naming the option', () => {
  const cases: Array<[string[], NodeJS.ProcessEnv, RegExp]> = [
    [['--backend', 'k8s'], {}, /--backend .*expected one of local, docker, auto/],
    [['--max-processes', 'lots'], {}, /--max-processes .*expected an integer/],
    [['--max-processes', '0'], {}, /at least 1/],
    [[], { EXEC_SERVER_INSECURE_NO_AUTH: 'maybe' }, /EXEC_SERVER_INSECURE_NO_AUTH: expected a boolean/],
    [['--listen', 'http://0.0.0.0:1'], {}, /expected ws:\/\/HOST:PORT/],
    [['--listen', 'ws://127.0.0.1:70000'], {}, /out of range/],
    [['--bogus'], {}, /Unknown option '--bogus'/],
    [['--memory-mb', '4096', '--max-memory-mb', '1024'], {}, /below --memory-mb/],
    [['--max-sessions', '-3'], {}, /--max-sessions .*must be at least 1, got -3/],
    [['--docker-host', 'foo://x'], {}, /--docker-host: unsupported docker host "foo:\/\/x"/],
    [['--docker-host', 'not an address'], {}, /--docker-host: "not an address" is not an address/],
    [[], { DOCKER_HOST: 'ssh://me@host' }, /DOCKER_HOST: unsupported docker host/],
    [['--docker-host', 'unix:///a.sock,,tcp://b:2375'], {}, /--docker-host: .* has an empty engine address/],
    [['--docker-host', 'unix:///a.sock,unix:///a.sock'], {}, /--docker-host: .* names an engine twice/],
    [['--docker-host', 'unix:///a.sock,foo://b'], {}, /--docker-host: unsupported docker host "foo:\/\/b"/],
    [['--log-format', 'xml'], {}, /--log-format .*expected one of auto, json, pretty/],
    [['serve'], {}, /Unexpected argument 'serve': the server takes only --flag VALUE options/],
  ];
  for (const [argv, env, re] of cases)
    assert.throws(
      () => loadConfig(argv, env),
      (e: Error) => e instanceof ConfigError && re.test(e.message),
      `${argv.join(' ')} ${JSON.stringify(env)}`,
    );
});

test('a non-loopback address needs a token unless --insecure-no-auth', () => {
  assert.throws(() => loadConfig(['--listen', 'ws://0.0.0.0:0'], {}), /refusing to listen on non-loopback/);
  assert.equal(loadConfig(['--listen', 'ws://0.0.0.0:0', '--token', 't'], {}).token, 't');
  assert.equal(loadConfig(['--listen', 'ws://0.0.0.0:0', '--insecure-no-auth'], {}).insecureNoAuth, true);
  assert.deepEqual(parseListen('ws://[::1]:0'), { host: '::1', port: 0 });
});

test('docs/guide.md shows the option table as the server has it', async () => {
  const table = markdownTable();
  for (const flag of ['--listen', '--backend', '--token', '--image', '--docker-host', '--tokens', '--denial-handling'])
    assert.match(table, new RegExp(`\`${flag}\``));
  const { readFile } = await import('node:fs/promises');
  const guide = await readFile(new URL('../../docs/guide.md', import.meta.url), 'utf8');
  assert.ok(guide.includes(table.trimEnd()), 'docs/guide.md holds markdownTable() as it is: paste it again');
});

test('--docker-agent-socket-dir: off or an absolute path short enough for a socket below it', () => {
  assert.match(loadConfig([], {}).dockerAgentSocketDir, /exec-server-agents-\d+$/);
  assert.equal(loadConfig(['--docker-agent-socket-dir', 'off'], {}).dockerAgentSocketDir, 'off');
  assert.equal(
    loadConfig([], { EXEC_SERVER_DOCKER_AGENT_SOCKET_DIR: '/run/exec-server-agents' }).dockerAgentSocketDir,
    '/run/exec-server-agents',
  );
  for (const bad of ['relative/dir', `/${'x'.repeat(60)}`])
    assert.throws(
      () => loadConfig(['--docker-agent-socket-dir', bad], {}),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.match(
          err.message,
          /--docker-agent-socket-dir: expected `off` or an absolute path of at most 60 characters/,
        );
        return true;
      },
    );
});

test('docker hosts the backend understands are accepted', () => {
  for (const host of ['unix:///var/run/docker.sock', '/run/docker.sock', 'tcp://127.0.0.1:2375', 'https://engine:2376'])
    assert.equal(loadConfig(['--docker-host', host], {}).dockerHost, host);
  // A pool of engines: every address checked, the list kept as given.
  const pool = 'unix:///var/run/docker.sock, tcp://127.0.0.1:2375';
  assert.equal(loadConfig(['--docker-host', pool], {}).dockerHost, pool);
});

test('disk limit: --disk-mb and --max-disk-mb, and a session asking above the maximum', async () => {
  const { resolveSessionSpec } = await import('../../src/sessions/session-spec.ts');
  const { ExecServerError } = await import('../../src/errors.ts');
  const defaults = loadConfig([], {});
  assert.equal(defaults.diskMb, 10_240);
  assert.equal(defaults.diskWatchSeconds, 30);
  const c = loadConfig(['--disk-mb', '64', '--max-disk-mb', '128', '--disk-watch-seconds', '1'], {});
  assert.equal(resolveSessionSpec({}, c, 'server').resources.diskMb, 64, 'a session asking nothing gets the default');
  assert.equal(resolveSessionSpec({ resources: { diskMb: 128 } }, c, 'server').resources.diskMb, 128);
  assert.throws(
    () => resolveSessionSpec({ resources: { diskMb: 129 } }, c, 'server'),
    (err: unknown) =>
      err instanceof ExecServerError &&
      err.code === 'EXEC_ERR_INVALID_PARAMS' &&
      /session\.resources\.diskMb 129 exceeds the server maximum 128/.test(err.message),
  );
  assert.throws(
    () => loadConfig(['--disk-mb', '200', '--max-disk-mb', '100'], {}),
    /--max-disk-mb \(100\) is below --disk-mb \(200\)/,
  );
  assert.throws(() => loadConfig(['--disk-mb', '8'], {}), /--disk-mb .*at least 16/);
  assert.throws(() => loadConfig(['--disk-watch-seconds', '0'], {}), /--disk-watch-seconds .*at least 1/);
});

test('booleans: true/false words either way, a bare flag is true; integers within their bounds', () => {
  for (const v of ['1', 'true', 'YES', 'on'])
    assert.equal(loadConfig([], { EXEC_SERVER_INSECURE_NO_AUTH: v }).insecureNoAuth, true, v);
  for (const v of ['0', 'false', 'No', 'off', ''])
    assert.equal(loadConfig([], { EXEC_SERVER_INSECURE_NO_AUTH: v }).insecureNoAuth, false, v);
  assert.equal(loadConfig(['--insecure-no-auth'], {}).insecureNoAuth, true);
  assert.equal(loadConfig(['--max-processes', ' 4096 '], {}).maxProcesses, 4096);
  assert.throws(() => loadConfig(['--max-processes', '4097'], {}), /--max-processes .*must be at most 4096, got 4097/);
  assert.throws(() => loadConfig(['--max-processes', '1.5'], {}), /expected an integer, got "1.5"/);
  assert.throws(() => loadConfig(['--image', ''], {}), /--image .*must not be empty/);
  assert.throws(() => loadConfig(['--log-level', 'loud'], {}), /expected one of fatal, error, warn/);
});

test('docker hosts: the flag, then EXEC_SERVER_DOCKER_HOST, then DOCKER_HOST; errors name where it came from', () => {
  assert.equal(loadConfig([], { DOCKER_HOST: 'tcp://d:2375' }).dockerHost, 'tcp://d:2375');
  assert.equal(
    loadConfig([], { DOCKER_HOST: 'tcp://d:2375', EXEC_SERVER_DOCKER_HOST: 'unix:///e.sock' }).dockerHost,
    'unix:///e.sock',
  );
  assert.throws(() => loadConfig([], { EXEC_SERVER_DOCKER_HOST: 'unix://' }), /^ConfigError: EXEC_SERVER_DOCKER_HOST:/);
  const many = Array.from({ length: 65 }, (_, i) => `tcp://e${i}:2375`).join(',');
  assert.throws(() => loadConfig(['--docker-host', many], {}), /--docker-host: at most 64 engines/);
  for (const ok of ['/s.sock', 'unix:///s.sock', 'tcp://h:1', 'http://h', 'https://h:2376']) checkDockerHost(ok, 'x');
  for (const bad of ['unix://', 'tcp://', 'ssh://h', 'h:2375'])
    assert.throws(
      () => checkDockerHost(bad, 'where'),
      (e: Error) => e instanceof ConfigError && /^where: /.test(e.message),
      bad,
    );
});

test('listen addresses and loopback', () => {
  assert.deepEqual(parseListen('ws://localhost:80/'), { host: 'localhost', port: 80 });
  assert.deepEqual(parseListen('ws://[fe80::1]:65535'), { host: 'fe80::1', port: 65535 });
  for (const bad of ['ws://h', 'wss://h:1', 'ws://h:123456', 'ws://h:1/path', 'ws://a b:1'])
    assert.throws(() => parseListen(bad), ConfigError, bad);
  for (const h of ['localhost', '::1', '127.0.0.1', '127.9.9.9']) assert.equal(isLoopback(h), true, h);
  for (const h of ['0.0.0.0', '10.0.0.1', '::', 'localhost.example', '128.0.0.1'])
    assert.equal(isLoopback(h), false, h);
});

test('runtime lists and warm-pool sizes by runtime and by live template', () => {
  assert.deepEqual(runtimeList(' runc, runsc ,,kata-1.0 '), ['runc', 'runsc', 'kata-1.0']);
  assert.throws(() => runtimeList('runc,bad name'), /--allowed-runtimes: "bad name" is not a runtime name/);
  assert.deepEqual(warmPoolRuntimes('runsc=2, runc=0,'), { runsc: 2, runc: 0 });
  for (const bad of ['runsc', 'runsc=257', 'runsc=-1', '=2', 'a b=1'])
    assert.throws(() => warmPoolRuntimes(bad), /expected RUNTIME=N \(N at most 256\)/, bad);
  assert.throws(() => loadConfig(['--runtime', '-x'], {}), /--runtime: "-x" is not a runtime name/);
  assert.throws(() => loadConfig(['--warm-pool-runtimes', 'x'], {}), /--warm-pool-runtimes/);
  // Template pools: by name or snapshot id.
  assert.deepEqual(warmPoolTemplates('warm-repl=2, sha256:ab12=1'), { 'warm-repl': 2, 'sha256:ab12': 1 });
  assert.throws(() => warmPoolTemplates('repl=300'), /--warm-pool-templates: expected NAME=N \(N at most 256\)/);
  assert.throws(() => loadConfig(['--warm-pool-templates', 'x'], {}), /--warm-pool-templates/);
  assert.equal(loadConfig(['--warm-pool-templates', 'repl=1'], {}).warmPoolTemplates, 'repl=1');
  assert.throws(() => loadConfig(['--max-cpus', '1', '--cpus', '2'], {}), /--max-cpus \(1\) is below --cpus \(2\)/);
  assert.throws(() => loadConfig(['--max-pids', '10', '--pids', '20'], {}), /--max-pids \(10\) is below --pids \(20\)/);
});

test('secret flags are redacted from a command line, in both spellings; others are kept', () => {
  const r = redactSecretFlags(['--listen', 'ws://h:1', '--token', 's3cret', '--preview-secret=k', '--tokens', 'a:b']);
  assert.deepEqual(r.argv, ['--listen', 'ws://h:1', '--token', '***', '--preview-secret=***', '--tokens', '***']);
  assert.deepEqual(r.flags, ['--token', '--preview-secret', '--tokens']);
  assert.ok(!JSON.stringify(r).includes('s3cret'));
});

test('--help lists every flag with its variable and default', () => {
  const help = helpText();
  assert.match(help, /^Usage: exec-server serve \[options\]/);
  assert.match(help, /--max-processes {2}\[EXEC_SERVER_MAX_PROCESSES\] \(default: 64\)/);
  assert.match(help, /--token {2}\[EXEC_SERVER_TOKEN\]\n/);
});

test('--fleet: a replica id and an advertised URL, derived from a fixed --listen port; nothing without --fleet', async () => {
  const { fleetIdentity } = await import('../../src/config/fleet.ts');
  assert.equal(fleetIdentity(loadConfig([], {})), undefined);
  assert.throws(() => loadConfig(['--replica-id', 'a'], {}), /with --fleet only/);
  assert.throws(() => loadConfig(['--fleet', '--listen', 'ws://127.0.0.1:0'], {}), /port 0/);
  assert.throws(
    () => loadConfig(['--fleet', '--listen', 'ws://127.0.0.1:9000', '--replica-id', 'a/b'], {}),
    /replica-id/,
  );
  const c = loadConfig(['--fleet', '--listen', 'ws://127.0.0.1:9000', '--replica-id', 'pod-1'], {});
  assert.deepEqual(fleetIdentity(c), { replicaId: 'pod-1', advertiseUrl: 'http://127.0.0.1:9000' });
  const d = loadConfig(['--fleet', '--advertise-url', 'http://10.0.0.7:8765/'], {});
  assert.equal(fleetIdentity(d)?.advertiseUrl, 'http://10.0.0.7:8765');
  assert.match(fleetIdentity(d)?.replicaId ?? '', /^r-[0-9a-f]{8}$/);
});

test('--local-host-dirs: absolute paths only; it confines the tenants not allowed danger-full-access', () => {
  assert.throws(
    () => loadConfig(['--local-host-dirs', '/srv/a,work'], {}),
    /--local-host-dirs.*absolute paths.*"work"/,
  );
  const config = loadConfig(
    ['--local-host-dirs', '/srv/a/, /srv/b/../c', '--allowed-sandbox-types', 'workspace-write,ops:danger-full-access'],
    {},
  );
  assert.deepEqual(hostDirsFor(config, 'alice'), ['/srv/a', '/srv/c']);
  assert.equal(hostDirsFor(config, 'ops'), undefined, 'allowed danger-full-access: not confined');
  assert.equal(hostDirsFor(loadConfig([], {}), 'alice'), undefined, 'every type allowed by default');
  assert.deepEqual(hostDirsFor(loadConfig(['--allowed-sandbox-types', 'read-only,workspace-write'], {}), 'a'), []);
});
