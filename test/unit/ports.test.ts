/** A session's exposed ports (src/sessions/ports.ts) over a fake session host: limits, opening, closing ends connections. */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import type { ResolvedSandbox } from '../../src/backends/types.ts';
import { execError } from '../../src/errors.ts';
import { type PortsHost, SessionPorts } from '../../src/sessions/ports.ts';

function host(over: { previewPorts?: boolean; alive?: boolean; connect?: boolean } = {}) {
  const opened: Array<{ port: number; sandbox: ResolvedSandbox; stream: PassThrough }> = [];
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
  };
  return { h, opened };
}

test('exposing: needs previewPorts, a live session and a backend that connects; again is the same answer', () => {
  assert.throws(
    () => new SessionPorts(host({ previewPorts: false }).h, { maxPorts: 2, maxConnections: 2 }).expose(80),
    {
      code: 'EXEC_ERR_REJECTED',
    },
  );
  assert.throws(() => new SessionPorts(host({ alive: false }).h, { maxPorts: 2, maxConnections: 2 }).expose(80), {
    code: 'EXEC_ERR_SESSION_DEAD',
  });
  assert.throws(() => new SessionPorts(host({ connect: false }).h, { maxPorts: 2, maxConnections: 2 }).expose(80), {
    code: 'EXEC_ERR_UNSUPPORTED',
  });
  const ports = new SessionPorts(host().h, { maxPorts: 2, maxConnections: 2 });
  const first = ports.expose(8080);
  assert.equal(ports.expose(8080), first);
  ports.expose(3000);
  assert.throws(() => ports.expose(9000), { code: 'EXEC_ERR_PROCESS_LIMIT', message: /at most 2 ports/ });
  assert.deepEqual(
    ports.list().map((p) => p.port),
    [3000, 8080],
  );
  assert.equal(ports.has(3000), true);
});

test('opening: only exposed ports, through the session sandbox, up to the connection limit', async () => {
  const { h, opened } = host();
  const ports = new SessionPorts(h, { maxPorts: 4, maxConnections: 1 });
  await assert.rejects(ports.open(80), { code: 'EXEC_ERR_NOT_FOUND', message: 'port 80 of session s1 is not exposed' });
  ports.expose(80);
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
  ports.expose(80);
  ports.expose(81);
  const a = await ports.open(80);
  const b = await ports.open(81);
  assert.equal(ports.close(80), true);
  assert.equal(ports.close(80), false);
  assert.equal(a.destroyed, true);
  assert.equal(b.destroyed, false);
  ports.closeAll();
  assert.equal(b.destroyed, true);
  assert.deepEqual(ports.list(), []);
  await assert.rejects(ports.open(81), { code: 'EXEC_ERR_NOT_FOUND' });
});
