/**
 * The PTY tail guard against node-pty's own teardown: node-pty destroys its reader 200 ms after
 * the child exits, read or not. Here that destroy is called at the worst moment (the child is
 * gone, its output unread because flow control paused the reader), as a stalled loop would.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import pty from 'node-pty';
import { spawnPty } from '../../src/backends/local/pty-process.ts';
import type { BackendExit } from '../../src/backends/types.ts';

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

test('node-pty destroying its reader after the exit loses no unread output', { timeout: 30_000 }, async () => {
  const realSpawn = pty.spawn;
  let term: pty.IPty | undefined;
  pty.spawn = (...args: Parameters<typeof pty.spawn>) => (term = realSpawn(...args));
  // The guard's timers are unref'd (a server's loop is alive anyway); this test's loop is not.
  const keepAlive = setInterval(() => undefined, 1000);
  try {
    for (let run = 0; run < 10; run++) {
      const chunks: Buffer[] = [];
      let exit: BackendExit | undefined;
      const ended = new Promise<void>((resolve) => {
        const proc = spawnPty(
          { file: 'sh', args: ['-c', 'head -c 3000 /dev/zero | tr "\\0" a'], cwd: tmpdir(), env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin' }, size: { cols: 80, rows: 24 }, sandboxType: 'none' },
          { output: (_stream, data) => chunks.push(data), exit: (e) => { exit = e; resolve(); } },
        );
        proc.pauseOutput();
      });
      const child = term!;
      while (alive(child.pid)) await new Promise((r) => setImmediate(r));
      (child as unknown as { _socket: { destroy(): void } })._socket.destroy();
      await ended;
      assert.equal(Buffer.concat(chunks).length, 3000, `run ${run}`);
      assert.deepEqual(exit, { kind: 'exited', code: 0 });
    }
  } finally {
    clearInterval(keepAlive);
    pty.spawn = realSpawn;
  }
});
