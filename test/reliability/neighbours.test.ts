/**
 * A noisy session leaves its neighbours alone (issue 25, "What held"), on each backend: while one
 * session holds 200 background processes and floods 300 MB of output through the server, another
 * session's JSON-RPC round trip and its command round trip stay close to what they were before,
 * and the server stays up. The bounds are generous (the machine running the suite is shared):
 * they catch a server that stalls behind the flood, not a slower CPU.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RpcConnection } from '../../src/client/rpc-connection.ts';
import { dockerTestOptions } from '../docker/engine.ts';
import { BACKENDS } from '../support/backends.ts';
import type { BackendKind } from '../support/harness.ts';

const { startServer, TestSession } = await import('../support/harness.ts');

const FLOOD_BYTES = 300 * 1000 * 1000;

function median(xs: number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

for (const backend of BACKENDS) {
  const options = backend === 'docker' ? dockerTestOptions : { timeout: 180_000 };
  test(
    `neighbours (${backend}): 200 background processes and a 300 MB flood leave another session's round trips alone`,
    options,
    async (t) => {
      const server = await startServer({ backend: backend as BackendKind });
      t.after(() => server.close());
      const quiet = await TestSession.open(server.url);
      t.after(() => quiet.close());
      const measure = async (n: number): Promise<{ rpc: number; command: number }> => {
        const rpc: number[] = [];
        const command: number[] = [];
        for (let i = 0; i < n; i++) {
          let t0 = performance.now();
          await quiet.request('session/info');
          rpc.push(performance.now() - t0);
          t0 = performance.now();
          const r = await quiet.run(`rt-${Math.random().toString(16).slice(2)}`, ['true']);
          command.push(performance.now() - t0);
          assert.equal(r.exited['exitCode'], 0);
        }
        return { rpc: median(rpc), command: median(command) };
      };
      await measure(5); // warm up
      const before = await measure(15);

      // The noisy session: binary output frames, and nothing kept of them here but their size.
      const noisy = await RpcConnection.open(server.url);
      t.after(() => noisy.close());
      await noisy.request('initialize', { clientName: 'noisy', binaryOutput: true });
      noisy.notify('initialized', {});
      let received = 0;
      const exited = new Set<string>();
      noisy.onNotification((n) => {
        if (n.method === 'process/output' && n.params.processId === 'flood')
          received += 'data' in n.params ? n.params.data.length : Buffer.byteLength(n.params.chunk, 'base64');
        if (n.method === 'process/exited') exited.add(n.params.processId);
      });
      await noisy.request('process/start', {
        processId: 'bg',
        argv: ['sh', '-c', 'for i in $(seq 200); do sleep 300 & done; echo started'],
        tty: false,
      });
      const start = Date.now();
      while (!exited.has('bg') && Date.now() - start < 30_000) await new Promise((r) => setTimeout(r, 50));
      assert.ok(exited.has('bg'), 'the background processes were started');
      await noisy.request('process/start', {
        processId: 'flood',
        argv: ['sh', '-c', `head -c ${FLOOD_BYTES} /dev/zero | tr '\\0' a`],
        tty: false,
      });
      const during = await measure(15);
      const flooding = !exited.has('flood');
      while (!exited.has('flood') && Date.now() - start < 120_000) await new Promise((r) => setTimeout(r, 50));
      assert.ok(exited.has('flood'), `the flood ended (${received} bytes read)`);
      assert.equal(received, FLOOD_BYTES, 'every byte of the flood went through the server');
      t.diagnostic(
        `before: rpc ${before.rpc.toFixed(2)} ms, command ${before.command.toFixed(2)} ms; during (${flooding ? 'flood still running' : 'flood over'}): rpc ${during.rpc.toFixed(2)} ms, command ${during.command.toFixed(2)} ms; ${received} bytes streamed`,
      );
      assert.ok(flooding, 'measured while the flood ran');
      assert.ok(during.rpc < Math.max(25, before.rpc * 10), `rpc round trip ${during.rpc} ms (before ${before.rpc})`);
      assert.ok(
        during.command < Math.max(100, before.command * 5),
        `command round trip ${during.command} ms (before ${before.command})`,
      );
      assert.equal((await fetch(`${server.httpUrl}/healthz`)).status, 200);
      const ps = await noisy.request<{ processes?: unknown[] }>('process/list', {});
      assert.ok(Array.isArray(ps.processes), 'the noisy session still answers');
    },
  );
}
