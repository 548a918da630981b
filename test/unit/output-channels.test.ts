import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import net from 'node:net';
import { dirname } from 'node:path';
import { test } from 'node:test';
import { OutputChannels } from '../../src/backends/local/output-channels.ts';

/** Runs `sh -c script` with stdout on a fresh channel; resolves with what arrived, at its end. */
async function runOnChannel(channels: OutputChannels, script: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  const { reader, childEnd } = await channels.open((d) => parts.push(Buffer.from(d)));
  const child = spawn('sh', ['-c', script], { stdio: ['ignore', childEnd, 'inherit'] });
  childEnd.destroy();
  await new Promise<void>((resolve) => reader.once('end', resolve));
  await new Promise<void>((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', () => resolve())));
  return Buffer.concat(parts);
}

test('output channels: a child writes its stdout through a channel; every byte arrives, then the end', async () => {
  const channels = await OutputChannels.create();
  try {
    const [a, b] = await Promise.all([
      runOnChannel(channels, 'head -c 3000000 /dev/zero | tr "\\0" a'),
      runOnChannel(channels, 'printf "one\\ntwo\\n"'),
    ]);
    assert.equal(a.length, 3_000_000);
    assert.ok(a.every((c) => c === 0x61));
    assert.equal(b.toString(), 'one\ntwo\n');
  } finally {
    await channels.close();
  }
});

test('output channels: a connection without the right token never becomes a channel', async () => {
  const channels = await OutputChannels.create();
  try {
    for (const token of [Buffer.alloc(16, 7), Buffer.alloc(40, 7)]) {
      const intruder = net.connect(channels.socketPath);
      const closedByServer = await new Promise<boolean>((resolve) => {
        intruder.once('connect', () => intruder.write(token));
        intruder.once('close', () => resolve(true));
        intruder.once('error', () => undefined);
        setTimeout(() => resolve(false), 2000).unref();
      });
      intruder.destroy();
      assert.ok(closedByServer, `the listener kept a connection with a wrong ${token.length}-byte token`);
    }
    assert.equal((await runOnChannel(channels, 'echo ok')).toString(), 'ok\n', 'channels still work afterwards');
  } finally {
    await channels.close();
  }
});

test('output channels: the socket lives in a private directory that close removes', async () => {
  const channels = await OutputChannels.create();
  const dir = dirname(channels.socketPath);
  assert.equal((await stat(dir)).mode & 0o777, 0o700);
  await channels.close();
  await assert.rejects(stat(dir), { code: 'ENOENT' });
});
