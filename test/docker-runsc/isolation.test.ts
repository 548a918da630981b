/**
 * What a command in a session can and cannot reach, under runc and under gVisor: the rows of
 * the isolation table in docs/docker-backend.md ("Isolation"), each shown from inside a real
 * session of each runtime.
 */
import assert from 'node:assert/strict';
import { release } from 'node:os';
import { after, before, test } from 'node:test';
import type { DockerBackend } from '../../src/backends/docker/index.ts';
import type { BackendSession } from '../../src/backends/types.ts';
import { dockerTestOptions, engineReady } from '../docker/engine.ts';
import { makeBackend, RecordingSink, sessionSpec, spawnRequest } from '../docker/helpers.ts';

const RUNTIMES = ['runc', 'runsc'] as const;
let backend: DockerBackend;
const sessions = new Map<string, BackendSession>();
const peers = new Map<string, BackendSession>();

before(async () => {
  if (!engineReady) return;
  backend = makeBackend({ allowedRuntimes: ['runsc'] });
  for (const runtime of RUNTIMES) {
    sessions.set(runtime, await backend.createSession(sessionSpec({ runtime })));
    peers.set(runtime, await backend.createSession(sessionSpec({ runtime, network: true })));
  }
});
after(async () => {
  if (engineReady) await backend.close();
});

async function sh(s: BackendSession, script: string): Promise<string> {
  const sink = new RecordingSink();
  await s.spawn(spawnRequest(['sh', '-c', script]), sink);
  await sink.exited;
  return sink.text();
}

for (const runtime of RUNTIMES) {
  test(`${runtime}: capabilities are the six kept ones, for root too`, dockerTestOptions, async () => {
    assert.match(
      await sh(
        sessions.get(runtime)!,
        'grep CapEff /proc/self/status; mount -t tmpfs x /mnt 2>&1; ping -c1 127.0.0.1 2>&1',
      ),
      /CapEff:\s+00000000000000eb[\s\S]*mount: permission denied[\s\S]*ping: permission denied/,
    );
  });

  test(`${runtime}: the kernel a command talks to`, dockerTestOptions, async () => {
    const out = await sh(
      sessions.get(runtime)!,
      'uname -r; grep "^Seccomp:" /proc/self/status; dmesg 2>&1 | head -n 1',
    );
    if (runtime === 'runc') {
      // The host's kernel, behind Docker's default seccomp filter (which also refuses the kernel log).
      assert.match(out, new RegExp(`^${release().replace(/\./g, '\\.')}\\nSeccomp:\\s+2\\n.*Operation not permitted`));
    } else {
      // gVisor's Sentry answers every system call; the host kernel is not reached directly.
      assert.match(out, /^4\.4\.0\nSeccomp:\s+0\n.*Starting gVisor/);
    }
  });

  test(
    `${runtime}: network: only loopback, even when the policy grants network under gVisor`,
    dockerTestOptions,
    async () => {
      assert.equal(await sh(sessions.get(runtime)!, 'ls /sys/class/net'), 'lo\n');
      const granted = await sh(peers.get(runtime)!, 'ls /sys/class/net | tr "\\n" " "');
      if (runtime === 'runc') assert.match(granted, /eth0/);
      else assert.equal(granted, 'lo ');
    },
  );

  test(
    `${runtime}: other sessions and the host: no processes, no files, no engine socket`,
    dockerTestOptions,
    async () => {
      const s = sessions.get(runtime)!;
      const peer = peers.get(runtime)!;
      await sh(peer, 'echo peer-secret > /workspace/peer.txt; setsid sleep 300 </dev/null >/dev/null 2>&1 &');
      const out = await sh(
        s,
        'ps -o pid,args | grep -c "[s]leep 300"; cat /workspace/peer.txt 2>&1; ls /var/run/docker.sock /run/docker.sock 2>&1; cat /proc/1/cmdline | tr "\\0" " "',
      );
      assert.match(out, /^0\n/, "the peer session's process is not visible");
      assert.match(out, /peer\.txt'?: No such file or directory/);
      assert.match(out, /docker\.sock: No such file or directory[\s\S]*docker\.sock: No such file or directory/);
      assert.match(out, /docker-init -- \/bin\/sh -c trap/, "PID 1 is the session's own init, not the host's");
    },
  );
}
