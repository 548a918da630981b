/** The local sandbox's start-up probe (src/backends/local/bubblewrap.ts): one failed start is not "unavailable". */
import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { probeBubblewrap } from '../../src/backends/local/bubblewrap.ts';

/** A stand-in `bwrap` that fails its first `failures` starts, then succeeds; it counts its calls. */
async function flakyBwrap(failures: number): Promise<{ path: string; calls: () => Promise<number>; dir: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'probe-'));
  const count = join(dir, 'count');
  await writeFile(count, '0');
  const path = join(dir, 'bwrap');
  await writeFile(
    path,
    `#!/bin/sh\nn=$(($(cat ${count}) + 1)); echo $n > ${count}\n[ $n -gt ${failures} ] || { echo "clone: busy" >&2; exit 1; }\n`,
  );
  await chmod(path, 0o755);
  return { path, dir, calls: async () => Number((await readFile(count, 'utf8')).trim()) };
}

test('a start that fails once is tried again, and the sandbox is available', async (t) => {
  const bwrap = await flakyBwrap(1);
  t.after(() => rm(bwrap.dir, { recursive: true, force: true }));
  assert.deepEqual(await probeBubblewrap(bwrap.path), { available: true, path: bwrap.path });
  assert.equal(await bwrap.calls(), 2);
});

test('a sandbox that never starts is unavailable after the bounded attempts, with the reason', async (t) => {
  const bwrap = await flakyBwrap(99);
  t.after(() => rm(bwrap.dir, { recursive: true, force: true }));
  const probe = await probeBubblewrap(bwrap.path, 3);
  assert.equal(probe.available, false);
  assert.match(String(probe.reason), /cannot start a sandbox here: clone: busy/);
  assert.equal(await bwrap.calls(), 3);
});

test('a missing binary is final at once', async () => {
  const probe = await probeBubblewrap('/nonexistent/bwrap');
  assert.equal(probe.available, false);
  assert.match(String(probe.reason), /not installed/);
});
