/**
 * Flow control through a relayed WebSocket, with real replicas on the real engine: a client of
 * replica B resuming a session replica A owns stops reading while its command floods output.
 * The relay in B holds a bounded amount and stops reading A, so A's flow control pauses the
 * session's output and its stall timeout cuts the connection (4001), as for a client of its own;
 * B's memory does not take the flood.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { RpcConnection } from '../../src/client/rpc-connection.ts';
import { createSession, requestJson } from '../http/helpers.ts';
import { sleep } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';
import { Fleet } from './fleet-replicas.ts';

const instanceId = `fleet-flow-${randomUUID().slice(0, 8)}`;
const fleet = new Fleet({
  instanceId,
  flags: () => ['--ws-stall-timeout-ms', '3000', '--ws-buffer-limit-bytes', String(16 * 1024 * 1024)],
});

/** Resident memory of process `pid`, in MiB. */
function rssMib(pid: number | undefined): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? NaN) / 1024;
}

/** Polls `f` every 200 ms until it returns true, for at most `ms`. */
async function until(what: string, ms: number, f: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await f())) {
    if (Date.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`);
    await sleep(200);
  }
}

test('a relayed client that stops reading backs up into the owner: paused, then cut 4001; the relay stays small', {
  ...dockerTestOptions,
  timeout: dockerTestOptions.skip ? 1000 : 180_000,
}, async (t) => {
  const [a, b] = await fleet.begin(t, 'fa', 'fb');
  const { sessionId } = await createSession(a, { sandbox: { type: 'danger-full-access' }, approvalPolicy: 'never' });
  const conn = await RpcConnection.open(b.url);
  t.after(() => conn.socket.terminate());
  await conn.request('initialize', { clientName: 'fleet-flow', resumeSessionId: sessionId });
  conn.notify('initialized', {});
  const before = rssMib(b.child.pid);
  await conn.request('process/start', {
    processId: 'flood',
    argv: ['sh', '-c', 'head -c 400000000 /dev/zero'],
    cwd: '/workspace',
    tty: false,
  });
  // From now on the client reads nothing.
  conn.socket.pause();
  const slowConsumers = async (): Promise<number> => {
    const text = String((await requestJson<string>(`${a.http}/metrics`, 'GET')).body);
    return Number(/^exec_server_websocket_slow_consumer_disconnects_total (\d+)/m.exec(text)?.[1] ?? 0);
  };
  // The owner finds its connection to the relay behind for longer than its stall timeout.
  await until(
    'the owner cuts the relayed connection as a slow consumer',
    60_000,
    async () => (await slowConsumers()) >= 1,
  );
  const grown = rssMib(b.child.pid) - before;
  assert.ok(grown < 100, `the relaying replica grew by ${grown.toFixed(0)} MiB while its client read nothing`);
  // Read again: what was sent arrives, then the owner's close, passed on by the relay.
  conn.socket.resume();
  await until('the client sees the close', 30_000, () => conn.closeCode !== undefined);
  assert.equal(conn.closeCode, 4001, conn.closeReason);
  assert.match(String(conn.closeReason), /slow consumer/);
});
