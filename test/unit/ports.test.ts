/**
 * A session's exposed ports (src/sessions/ports.ts) over a fake session host: limits, opening,
 * closing ends connections, the record stored on every change, a failed store undoes the expose.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import type { ResolvedSandbox } from '../../src/backends/types.ts';
import { execError } from '../../src/errors.ts';
import { type PortsHost, SessionPorts } from '../../src/sessions/ports.ts';

function host(over: { previewPorts?: boolean; alive?: boolean; connect?: boolean; store?: boolean } = {}) {
  const opened: Array<{ port: number; sandbox: ResolvedSandbox; stream: PassThrough }> = [];
  const stored: number[][] = [];
  const h: PortsHost = {
    id: 's1',
    spec: {
      previewPorts: over.previewPorts ?? true,
      policy: {
        sandbox: { type: 'workspace-write', networkAccess: true },
        denyRead: [],
        approvalPolicy: 'never',
        strictAutoReview: false,
        denialHandling: 'server',
      },
    },
    backend: {
      workdir: '/w',
      ...(over.connect === false
        ? {}
        : {
            connectPort: async (port: number, sandbox: ResolvedSandbox) => {
              const stream = new PassThrough();
              opened.push({ port, sandbox, stream });
              return stream;
            },
          }),
    },
    assertAlive: () => {
      if (over.alive === false) throw execError('EXEC_ERR_SESSION_DEAD', 'dead');
    },
    persistRecord: async () => {
      if (over.store === false) throw execError('EXEC_ERR_BACKEND_UNAVAILABLE', 'engine away');
      stored.push(ports?.list().map((p) => p.port) ?? []);
    },
  };
  let ports: SessionPorts | undefined;
  return { h, opened, stored, track: (p: SessionPorts) => (ports = p) };
}

test('exposing: needs previewPorts, a live session and a backend that connects; again is the same answer', async () => {
  const limits = { maxPorts: 2, maxConnections: 2 };
  await assert.rejects(new SessionPorts(host({ previewPorts: false }).h, limits).expose(80), {
    code: 'EXEC_ERR_REJECTED',
  });
  await assert.rejects(new SessionPorts(host({ alive: false }).h, limits).expose(80), {
    code: 'EXEC_ERR_SESSION_DEAD',
  });
  await assert.rejects(new SessionPorts(host({ connect: false }).h, limits).expose(80), {
    code: 'EXEC_ERR_UNSUPPORTED',
  });
  const { h, stored, track } = host();
  const ports = track(new SessionPorts(h, limits));
  const first = await ports.expose(8080);
  assert.equal(await ports.expose(8080), first);
  await ports.expose(3000);
  await assert.rejects(ports.expose(9000), { code: 'EXEC_ERR_PROCESS_LIMIT', message: /at most 2 ports/ });
  assert.deepEqual(
    ports.list().map((p) => p.port),
    [3000, 8080],
  );
  assert.equal(ports.has(3000), true);
  assert.deepEqual(stored, [[8080], [3000, 8080]], 'the record is stored with each new port');
  await ports.close(8080);
  assert.deepEqual(stored.at(-1), [3000], 'and when one closes');
});

test('a port whose record cannot be stored is not exposed; a recovered record restores its ports', async () => {
  const failing = new SessionPorts(host({ store: false }).h, { maxPorts: 2, maxConnections: 2 });
  await assert.rejects(failing.expose(80), { code: 'EXEC_ERR_BACKEND_UNAVAILABLE' });
  assert.equal(failing.has(80), false);
  const restored = new SessionPorts(host().h, { maxPorts: 2, maxConnections: 2 });
  restored.restore([
    { port: 80, exposedAt: '2026-12-06T00:00:00.000Z' },
    { port: 81, exposedAt: '2026-12-06T00:00:01.000Z' },
    { port: 82, exposedAt: '2026-12-06T00:00:02.000Z' },
  ]);
  assert.deepEqual(
    restored.list().map((p) => p.port),
    [80, 81],
    'up to the limit',
  );
});

test('a port whose closing cannot be stored stays exposed, and closes once it can be', async () => {
  const over = { store: true };
  const { h, stored, track } = host(over);
  const ports = track(new SessionPorts(h, { maxPorts: 2, maxConnections: 2 }));
  await ports.expose(80);
  const stream = await ports.open(80);
  over.store = false;
  await assert.rejects(ports.close(80), { code: 'EXEC_ERR_BACKEND_UNAVAILABLE' });
  assert.equal(ports.has(80), true, 'still exposed, as the stored record says');
  assert.equal(stream.destroyed, false, 'its connection goes on');
  over.store = true;
  assert.equal(await ports.close(80), true);
  assert.equal(ports.has(80), false);
  assert.equal(stream.destroyed, true);
  assert.deepEqual(stored.at(-1), [], 'the record no longer lists it');
});

test('opening: only exposed ports, through the session sandbox, up to the connection limit', async () => {
  const { h, opened } = host();
  const ports = new SessionPorts(h, { maxPorts: 4, maxConnections: 1 });
  await assert.rejects(ports.open(80), { code: 'EXEC_ERR_NOT_FOUND', message: 'port 80 of session s1 is not exposed' });
  await ports.expose(80);
  const stream = await ports.open(80);
  assert.deepEqual(opened[0]?.sandbox, {
    kind: 'restricted',
    writableRoots: ['/w', '/tmp'],
    denyRead: [],
    network: true,
  });
  await assert.rejects(ports.open(80), { code: 'EXEC_ERR_BUSY' });
  stream.destroy();
  await once(stream, 'close');
  const again = await ports.open(80);
  assert.equal(opened.length, 2);
  again.destroy();
});

test('closing a port ends its connections only; closing all ends everything and refuses new ones', async () => {
  const ports = new SessionPorts(host().h, { maxPorts: 4, maxConnections: 4 });
  await ports.expose(80);
  await ports.expose(81);
  const a = await ports.open(80);
  const b = await ports.open(81);
  assert.equal(await ports.close(80), true);
  assert.equal(await ports.close(80), false);
  assert.equal(a.destroyed, true);
  assert.equal(b.destroyed, false);
  ports.closeAll();
  assert.equal(b.destroyed, true);
  assert.deepEqual(ports.list(), []);
  await assert.rejects(ports.open(81), { code: 'EXEC_ERR_NOT_FOUND' });
});
