/** The host's process ids against the sessions a server may make (docker/engine/host-pids.ts). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { engineError } from '../../src/backends/docker/engine/engine-client.ts';
import {
  checkHostPids,
  hasLocalEngine,
  type HostThreads,
  pidHint,
  pidShortfall,
  readHostThreads,
} from '../../src/backends/docker/engine/host-pids.ts';

const files = (f: Record<string, string>) => async (path: string) => {
  const text = f[path];
  if (text === undefined) throw Object.assign(new Error(`ENOENT: ${path}`), { code: 'ENOENT' });
  return text;
};

test('the host limit is the lower of pid_max and threads-max; threads in use come from /proc/loadavg', async () => {
  const host = (pidMax: string, threadsMax: string, loadavg = '0.10 0.20 0.30 2/150 4242\n') =>
    readHostThreads(
      files({
        '/proc/sys/kernel/pid_max': pidMax,
        '/proc/sys/kernel/threads-max': threadsMax,
        '/proc/loadavg': loadavg,
      }),
    );
  assert.deepEqual(await host('32768\n', '192735\n'), { limit: 32768, limitName: 'pid_max', used: 150 });
  assert.deepEqual(await host('4194304\n', '192735\n'), { limit: 192735, limitName: 'threads-max', used: 150 });
  assert.equal(await host('32768\n', '192735\n', 'garbage'), undefined, 'an unreadable loadavg gives no figure');
  assert.equal(await readHostThreads(files({})), undefined, 'no /proc: no figure, no error');
  const real = await readHostThreads();
  assert.ok(real !== undefined && real.limit > 0 && real.used > 0 && real.used < real.limit, JSON.stringify(real));
});

test('a shortfall names the limit, the room and how to raise it; sessions that fit give none', () => {
  const host: HostThreads = { limit: 32768, limitName: 'pid_max', used: 150 };
  assert.equal(pidShortfall(host, 256), undefined);
  assert.equal(pidShortfall(host, 2038), undefined);
  const warning = pidShortfall(host, 3000);
  assert.match(warning ?? '', /^kernel\.pid_max is 32768 with 150 threads in use: room for about 2038 sessions/);
  assert.match(warning ?? '', /fewer than --max-sessions 3000\. .*raise kernel\.pid_max/);
  assert.match(pidShortfall({ limit: 100, limitName: 'threads-max', used: 500 }, 1) ?? '', /room for about 0 sessions/);
});

test("runc's failure to start a process names process ids; other engine failures are as they were", () => {
  const runc =
    "failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: can't get final child's PID from pipe: EOF: unknown";
  const err = engineError({ statusCode: 500, json: { message: runc } }, 'container start');
  assert.equal(err.code, 'EXEC_ERR_BACKEND');
  assert.ok(err.message.startsWith(`container start: ${runc} (process ids may have run out`), err.message);
  assert.match(err.message, /kernel\.pid_max and kernel\.threads-max; in the session, its pids limit\)$/);
  assert.match(pidHint('fork/exec /usr/bin/containerd-shim-runc-v2: resource temporarily unavailable'), /pid_max/);
  const other = engineError({ statusCode: 500, json: { message: 'no space left on device' } }, 'container create');
  assert.equal(other.message, 'container create: no space left on device');
});

test('the start-up check reads this host only for an engine on a local socket, and warns once', async () => {
  assert.equal(hasLocalEngine(['unix:///var/run/docker.sock']), true);
  assert.equal(hasLocalEngine(['/run/engine-a.sock', 'tcp://engine-b:2376']), true);
  assert.equal(hasLocalEngine(['tcp://engine-a:2376', 'https://engine-b:2376']), false);
  assert.equal(hasLocalEngine([], {}), true, 'no address: the default socket');
  assert.equal(hasLocalEngine([], { DOCKER_HOST: 'tcp://engine:2375' }), false);

  const warnings: string[] = [];
  const log = { warn: (_o: object, msg: string) => void warnings.push(msg) };
  const small = async (): Promise<HostThreads> => ({ limit: 32768, limitName: 'pid_max', used: 150 });
  let read = 0;
  const counted = async (): Promise<HostThreads> => {
    read++;
    return small();
  };
  await checkHostPids(['tcp://engine-a:2376'], 5000, log, counted);
  assert.equal(read, 0, 'a remote engine: this host is not read');
  await checkHostPids(['unix:///var/run/docker.sock'], 256, log, counted);
  assert.deepEqual(warnings, [], '256 sessions fit');
  await checkHostPids(['unix:///var/run/docker.sock'], 5000, log, counted);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0] ?? '', /--max-sessions 5000/);
});
