/**
 * One map of the notifications the server sends (`RPC_NOTIFICATIONS`): the server's `notify`
 * accepts nothing else (checked by tsc), docs/protocol.md lists exactly these, and what a real
 * server sends validates against the map's schemas.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { Compile } from 'typebox/compile';
import {
  NOTIFICATION_NAMES,
  RPC_NOTIFICATIONS,
  type NotificationName,
  type ServerNotification,
} from '../../src/protocol/index.ts';
import type { Notification as SdkNotification } from '../../src/client/index.ts';
import type { Connection } from '../../src/rpc/connection.ts';
import type { RpcPeer } from '../../src/rpc/rpc-peer.ts';
import type { WatchNotifier } from '../../src/sessions/files/missing-watches.ts';
import { startServer, TestSession } from '../support/harness.ts';

/** True only when A and B are the same type. */
type Same<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;

// Every way the server sends a notification takes the map's methods, and only those.
const senders: [
  Same<Parameters<RpcPeer<unknown>['notify']>[0], NotificationName>,
  Same<Parameters<Connection['notify']>[0], NotificationName>,
  Same<Parameters<Connection['notifyInitializing']>[0], NotificationName>,
  Same<Parameters<WatchNotifier['notify']>[0], NotificationName>,
  Same<SdkNotification['method'], NotificationName>,
] = [true, true, true, true, true];

/** Never called: what tsc must refuse. */
export function refusedByTheCompiler(peer: RpcPeer<unknown>, n: ServerNotification): void {
  // @ts-expect-error: not a notification of the protocol
  peer.notify('process/started', { processId: 'p' });
  // @ts-expect-error: the params of another notification
  peer.notify('process/closed', { watchId: 1 });
  if (n.method === 'fs/missingChanged') {
    // @ts-expect-error: narrowed by its method, fs/missingChanged has no processId
    void n.params.processId;
  }
}

test('the notify signatures take exactly the methods of RPC_NOTIFICATIONS', () => {
  assert.ok(senders.every((t) => t === true));
  assert.deepEqual(NOTIFICATION_NAMES, Object.keys(RPC_NOTIFICATIONS));
});

test('docs/protocol.md lists exactly the notifications of the map', async () => {
  const doc = await readFile(join(import.meta.dirname, '..', '..', 'docs', 'protocol.md'), 'utf8');
  const section = /^### Notifications\n([\s\S]*?)(?=^#{2,3} )/m.exec(doc)?.[1];
  assert.ok(section, 'docs/protocol.md has a Notifications section');
  const documented = [...section.matchAll(/^- `([a-zA-Z]+\/[a-zA-Z]+) \{/gm)].map((m) => m[1]);
  assert.deepEqual([...documented].sort(), [...NOTIFICATION_NAMES].sort());
});

test('what a real server sends is in the map and valid against its schema', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const s = await TestSession.open(server.url);
  t.after(() => s.close());
  const raw: Array<{ method: string; params: unknown }> = [];
  s.conn.socket.on('message', (data: Buffer, isBinary: boolean) => {
    if (isBinary) return;
    const m = JSON.parse(String(data)) as { id?: unknown; method?: unknown; params?: unknown };
    if (m.id === undefined && typeof m.method === 'string') raw.push({ method: m.method, params: m.params });
  });
  const workdir = (await s.request<{ workdir: string }>('session/info')).workdir;
  const watched = join(workdir, 'appears');
  await s.request('fs/watchMissing', { watchId: 7, missing: [watched] });
  await s.run('p1', ['bash', '-c', `echo out; echo err >&2; touch ${watched}; exit 3`]);
  await s.waitFor(() => raw.some((n) => n.method === 'fs/missingChanged'), 10_000, 'fs/missingChanged');
  const checks = Object.fromEntries(
    Object.entries(RPC_NOTIFICATIONS).map(([method, schema]) => [method, Compile(schema)]),
  );
  const seen = new Set<string>();
  for (const n of raw) {
    const check = checks[n.method];
    assert.ok(check, `${n.method} is in RPC_NOTIFICATIONS`);
    assert.ok(check.Check(n.params), `${n.method} ${JSON.stringify(n.params)} matches its schema`);
    seen.add(n.method);
  }
  for (const method of ['process/output', 'process/exited', 'process/closed', 'fs/missingChanged'])
    assert.ok(seen.has(method), `the server sent ${method}`);
});
