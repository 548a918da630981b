import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { BackendExit } from '../../src/backends/types.ts';
import { OutputChannels } from '../../src/backends/local/output-channels.ts';
import { spawnPipe } from '../../src/backends/local/pipe-process.ts';

/** Runs a pipe-mode command; resolves with its stdout, stderr (copied as the sink must) and exit. */
function run(
  channels: OutputChannels | undefined,
  script: string,
): Promise<{ out: string; err: string; exit: BackendExit }> {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  return new Promise((resolve, reject) => {
    spawnPipe(
      {
        file: 'sh',
        args: ['-c', script],
        cwd: process.cwd(),
        env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin' },
        stdin: false,
        sandboxType: 'none',
        channels,
      },
      {
        output: (stream, data) => (stream === 'stderr' ? err : out).push(Buffer.from(data)),
        exit: (exit) => resolve({ out: Buffer.concat(out).toString(), err: Buffer.concat(err).toString(), exit }),
      },
    ).catch(reject);
  });
}

test('pipe processes: the same output and exit with output channels and with plain pipes', async () => {
  const channels = await OutputChannels.create();
  try {
    const script = 'seq 1 20000; echo oops >&2; exit 3';
    const expected = Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join('');
    for (const via of [channels, undefined]) {
      const r = await run(via, script);
      assert.equal(r.out, expected, via ? 'through channels' : 'through plain pipes');
      assert.equal(r.err, 'oops\n');
      assert.deepEqual(r.exit, { kind: 'exited', code: 3 });
    }
  } finally {
    await channels.close();
  }
});
