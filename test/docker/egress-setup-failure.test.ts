/**
 * A session's egress that cannot start (docs/architecture.md, "Egress"): the exec agent refuses
 * to listen on 127.0.0.1:3128 because something in the container holds the port. At creation
 * the create fails (`EXEC_ERR_BACKEND`) and the session goes with everything it opened; at
 * re-adoption (a server restart) the session stays, without its proxy, and the port is not asked
 * of a later agent, so it still attaches and runs commands; an agent replaced under a session
 * with its proxy is asked again, and the connection it refuses is closed, not left open beside
 * the channel's. The agent's connections are counted in the container (/proc/net/unix), this
 * process's descriptors in /proc/self/fd.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { test } from 'node:test';
import type { BackendSession } from '../../src/backends/types.ts';
import { parseAllowList } from '../../src/egress/allow-list.ts';
import { SessionEgress, startEgress } from '../../src/egress/session-egress.ts';
import { tempDirFor } from '../support/temp-dir.ts';
import { dockerTestOptions } from './engine.ts';
import {
  docker,
  makeBackend,
  RecordingSink,
  removeInstanceContainers,
  runScript,
  sessionSpec,
  spawnRequest,
} from './helpers.ts';

/** 3128 in /proc/net/tcp{,6}'s hex, listening (state 0A); busybox nc listens on `[::]` (IPv4 too). */
const PROXY_PORT_LISTENING = /^\s*\d+: [0-9A-F]+:0C38 [0-9A-F]+:0000 0A /m;

function egressFor(): SessionEgress {
  const allow = ['127.0.0.2:80'];
  return new SessionEgress({ allow, entries: parseAllowList(allow) });
}

/** Something else takes the proxy's port first: a listener started through the engine, not the agent. */
async function occupyProxyPort(containerId: string): Promise<void> {
  await docker('exec', '-d', containerId, 'nc', '-l', '-p', '3128');
  const deadline = Date.now() + 10_000;
  while (!PROXY_PORT_LISTENING.test(await docker('exec', containerId, 'cat', '/proc/net/tcp', '/proc/net/tcp6'))) {
    assert.ok(Date.now() < deadline, 'the port is taken within 10 s');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * The agent's connections, counted in the container (where both ends of a link connection are:
 * a unix socket is accepted in its connector's namespace): connected sockets on the link (the
 * server's socket, mounted) or, through the engine, on the daemon's socket (one per attacher).
 */
async function agentConnections(containerId: string): Promise<number> {
  const lines = (await docker('exec', containerId, 'cat', '/proc/net/unix')).split('\n');
  return lines.filter((l) => l.endsWith('/agent.sock') && l.trim().split(/\s+/)[5] === '03').length;
}

/** Kills the agent daemon (and any attacher): the next command starts another. */
async function killAgent(containerId: string): Promise<void> {
  await docker(
    'exec',
    containerId,
    'sh',
    '-c',
    'for d in /proc/[0-9]*; do case "$(tr "\\0" " " <$d/cmdline 2>/dev/null)" in *exec-agent\\ *) kill -9 "${d#/proc/}";; esac; done',
  );
}

/** What this process has open. */
async function openDescriptors(): Promise<number> {
  return (await readdir('/proc/self/fd')).length;
}

async function waitUntil(what: string, ok: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok())) {
    assert.ok(Date.now() < end, what);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function ranOk(session: BackendSession): Promise<void> {
  const r = await runScript(session, 'echo ok');
  assert.equal(r.exitResult?.kind, 'exited', JSON.stringify(r.exitResult));
  assert.equal(r.text('stdout'), 'ok\n');
}

for (const linked of [true, false]) {
  const how = linked ? 'over its link' : 'through the engine';

  test(
    `egress refused at re-adoption (${how}): the session stays without its proxy and attaches again`,
    dockerTestOptions,
    async (t) => {
      const root = await tempDirFor(t, 'exec-server-egress-fail-');
      const instanceId = `egress-fail-${randomUUID().slice(0, 8)}`;
      t.after(() => removeInstanceContainers(instanceId));
      const options = { instanceId, ...(linked ? { agentSocketDir: root } : {}) };
      const first = makeBackend(options);
      t.after(() => first.close());
      const made = await first.createSession(sessionSpec());
      const containerId = made.containerId ?? '';
      await ranOk(made);
      await occupyProxyPort(containerId);
      // The server restarts: the agent keeps running; its successor re-adopts the container.
      await first.handOver();
      const second = makeBackend(options);
      t.after(() => second.close());
      const session = (await second.recover()).find((r) => r.session.id === made.id)?.session;
      assert.ok(session, 're-adopted');

      const egress = egressFor();
      t.after(() => egress.close());
      await assert.rejects(egress.start(session), (err: Error & { code?: string }) => {
        assert.equal(err.code, 'EXEC_ERR_BACKEND');
        assert.match(err.message, /egress proxy on 127\.0\.0\.1:3128: Address (already )?in use/);
        return true;
      });
      await ranOk(session);
      // A later agent (this one killed) is not asked for the port either: every attach would fail.
      await killAgent(containerId);
      await ranOk(session);
      const descriptors = await openDescriptors();
      for (let i = 0; i < 5; i++) await ranOk(session);
      assert.equal(await agentConnections(containerId), 1, 'one agent connection');
      assert.ok((await openDescriptors()) <= descriptors + 2, 'no descriptor held per command');
    },
  );

  test(
    `egress refused by a replaced agent (${how}): the command fails and the connection that asked is closed`,
    dockerTestOptions,
    async (t) => {
      const root = await tempDirFor(t, 'exec-server-egress-fail-');
      const backend = makeBackend(linked ? { agentSocketDir: root } : {});
      t.after(() => backend.close());
      t.after(() => removeInstanceContainers(backend.options.instanceId));
      const session = await backend.createSession(sessionSpec());
      const containerId = session.containerId ?? '';
      const egress = egressFor();
      t.after(() => egress.close());
      await egress.start(session);
      // The agent dies with its listener; a command of the session's takes the port meanwhile.
      await killAgent(containerId);
      await occupyProxyPort(containerId);
      const sink = new RecordingSink();
      await assert.rejects(session.spawn(spawnRequest(['true']), sink), (err: Error & { code?: string }) => {
        assert.equal(err.code, 'EXEC_ERR_BACKEND');
        assert.match(err.message, /exec agent cannot run the egress proxy: .*127\.0\.0\.1:3128/);
        return true;
      });
      // Through the engine nothing else connects: the refused connection must be gone. Over a
      // link, the agent dials the server again once it is.
      await waitUntil(
        'the refused connection is closed',
        async () => (await agentConnections(containerId)) === (linked ? 1 : 0),
      );
      await assert.rejects(session.spawn(spawnRequest(['true']), new RecordingSink()), { code: 'EXEC_ERR_BACKEND' });
      assert.ok((await agentConnections(containerId)) <= 1, 'refused again: still at most one');
    },
  );
}

test(
  'egress refused at creation: the create fails with EXEC_ERR_BACKEND and the session goes with what it opened',
  dockerTestOptions,
  async (t) => {
    const root = await tempDirFor(t, 'exec-server-egress-fail-');
    const backend = makeBackend({ agentSocketDir: root });
    t.after(() => backend.close());
    t.after(() => removeInstanceContainers(backend.options.instanceId));
    const session = await backend.createSession(sessionSpec());
    const containerId = session.containerId ?? '';
    await occupyProxyPort(containerId);
    const descriptors = await openDescriptors();

    // As SessionManager's create does it: the egress is started before the session is listed.
    const egress = egressFor();
    const destroyers: Array<() => void> = [];
    const held = {
      id: session.id,
      egress,
      onDestroy: (f: () => void) => {
        destroyers.push(f);
        return () => undefined;
      },
    };
    await assert.rejects(startEgress(held, session), (err: Error & { code?: string }) => {
      assert.equal(err.code, 'EXEC_ERR_BACKEND');
      assert.match(err.message, /exec agent cannot run the egress proxy: .*127\.0\.0\.1:3128/);
      return true;
    });
    assert.equal(await agentConnections(containerId), 1, 'no connection beside the channel’s');
    // The create removes the session (SessionManager's teardown): its destroy hooks, its container.
    for (const f of destroyers) f();
    await session.destroy();
    assert.equal((await docker('ps', '-aq', '--filter', `id=${containerId}`)).trim(), '');
    // The agent connection and the link's listener went with it.
    await waitUntil(`descriptors back below ${descriptors}`, async () => (await openDescriptors()) < descriptors);
  },
);
