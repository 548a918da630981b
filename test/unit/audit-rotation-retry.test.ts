/**
 * A rotation of the file audit log that fails part-way (one rename refused) and is retried, as
 * the log retries a failed rotation: the retry finishes it with the rotated files numbered on
 * from 1 (no gap), no file lost or replaced, and `--audit-log-max-files` still removes only the
 * oldest. The failure is made at the file operations the rotation uses (`RotationFs`).
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { openLogFile, ROTATION_FS, type RotationFs, rotationPlan, shiftRotated } from '../../src/audit/log-file.ts';

async function tempLog(): Promise<{ dir: string; path: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'audit-rotation-retry-'));
  return { dir, path: join(dir, 'audit.jsonl') };
}

/** The real file operations, whose `failAt`-th rename (1-based, counted over every call) is refused once. */
function failingRename(failAt: number): RotationFs & { renames: [string, string][] } {
  let count = 0;
  const renames: [string, string][] = [];
  return {
    ...ROTATION_FS,
    renames,
    rename: async (from, to) => {
      count++;
      if (count === failAt)
        throw Object.assign(new Error(`EACCES: permission denied, rename '${from}' -> '${to}'`), { code: 'EACCES' });
      // A rename onto a file would replace it: the test fails rather than let it happen.
      assert.equal(await ROTATION_FS.exists(to), false, `rename ${from} -> ${to} lands on a file`);
      renames.push([from, to]);
      await ROTATION_FS.rename(from, to);
    },
  };
}

/** The log's files: name -> content (each file holds its own name as written, so a move shows). */
async function contents(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const name of (await readdir(dir)).sort())
    if (!name.endsWith('.lock')) out[name] = await readFile(join(dir, name), 'utf8');
  return out;
}

/** `PATH` and `PATH.1`..`PATH.count`, each holding a line naming the file it was written as. */
async function rotatedSet(path: string, count: number): Promise<void> {
  await writeFile(path, 'was PATH\n');
  for (let n = 1; n <= count; n++) await writeFile(`${path}.${n}`, `was PATH.${n}\n`);
}

test('a rotation whose rename fails part-way is finished by the retry: numbers on from 1, nothing lost', async () => {
  const { dir, path } = await tempLog();
  await rotatedSet(path, 3);
  // Renames, highest first: .3 -> .4, then .2 -> .3 refused.
  const fs = failingRename(2);
  await assert.rejects(shiftRotated(path, 0, fs), { code: 'EACCES' });
  // The retry: the same call again, as the log's retry of a failed rotation does.
  await shiftRotated(path, 0, fs);
  assert.deepEqual(await contents(dir), {
    'audit.jsonl.1': 'was PATH\n',
    'audit.jsonl.2': 'was PATH.1\n',
    'audit.jsonl.3': 'was PATH.2\n',
    'audit.jsonl.4': 'was PATH.3\n',
  });
});

test('every point of failure converges: each rename refused once, then retried until done', async () => {
  for (const maxFiles of [0, 3, 5]) {
    for (let failAt = 1; failAt <= 5; failAt++) {
      const { dir, path } = await tempLog();
      await rotatedSet(path, 4);
      const fs = failingRename(failAt);
      let failures = 0;
      for (;;) {
        try {
          await shiftRotated(path, maxFiles, fs);
          break;
        } catch (err) {
          assert.equal((err as { code?: string }).code, 'EACCES');
          assert.ok(++failures <= 1, 'one refusal, one retry');
        }
      }
      const expected: Record<string, string> = {};
      const kept = maxFiles === 0 ? 5 : Math.min(5, maxFiles);
      expected['audit.jsonl.1'] = 'was PATH\n';
      for (let n = 2; n <= kept; n++) expected[`audit.jsonl.${n}`] = `was PATH.${n - 1}\n`;
      assert.deepEqual(await contents(dir), expected, `maxFiles ${maxFiles}, rename ${failAt} refused`);
    }
  }
});

test('a gap left by an earlier failure (or a crash mid-rotation) is closed by the next rotation', async () => {
  const { dir, path } = await tempLog();
  await writeFile(path, 'newest\n');
  await writeFile(`${path}.1`, 'one\n');
  await writeFile(`${path}.2`, 'two\n');
  await writeFile(`${path}.4`, 'four\n');
  await writeFile(`${path}.7`, 'seven\n');
  await shiftRotated(path, 0, failingRename(0));
  assert.deepEqual(await contents(dir), {
    'audit.jsonl.1': 'newest\n',
    'audit.jsonl.2': 'one\n',
    'audit.jsonl.3': 'two\n',
    'audit.jsonl.4': 'four\n',
    'audit.jsonl.5': 'seven\n',
  });
  // With a limit, the oldest go: what is past it once the numbers are closed up.
  await writeFile(path, 'newer\n');
  await shiftRotated(path, 3, failingRename(0));
  assert.deepEqual(await contents(dir), {
    'audit.jsonl.1': 'newer\n',
    'audit.jsonl.2': 'newest\n',
    'audit.jsonl.3': 'one\n',
  });
});

test('a retry after every rename was done (the new file failed to open) moves nothing again', async () => {
  const { dir, path } = await tempLog();
  await rotatedSet(path, 2);
  await shiftRotated(path, 0, failingRename(0));
  // The open of the new PATH failed: the rotation is retried with PATH already moved to PATH.1.
  await shiftRotated(path, 0, failingRename(0));
  assert.deepEqual(await contents(dir), {
    'audit.jsonl.1': 'was PATH\n',
    'audit.jsonl.2': 'was PATH.1\n',
    'audit.jsonl.3': 'was PATH.2\n',
  });
});

test('the plan: moves down lowest first, then up highest first; removes only the oldest', () => {
  assert.deepEqual(rotationPlan([1, 2, 3], 2, 0), {
    remove: [],
    moves: [
      [3, 4],
      [2, 3],
      [1, 2],
    ],
  });
  assert.deepEqual(rotationPlan([4, 2, 1], 2, 0), {
    remove: [],
    moves: [
      [2, 3],
      [1, 2],
    ],
  });
  assert.deepEqual(rotationPlan([3, 4], 2, 0), {
    remove: [],
    moves: [
      [3, 2],
      [4, 3],
    ],
  });
  assert.deepEqual(rotationPlan([2, 3], 2, 0), { remove: [], moves: [] });
  assert.deepEqual(rotationPlan([3, 5, 9], 1, 0), {
    remove: [],
    moves: [
      [3, 1],
      [5, 2],
      [9, 3],
    ],
  });
  assert.deepEqual(rotationPlan([1, 2, 3, 4], 2, 3), {
    remove: [4, 3],
    moves: [
      [2, 3],
      [1, 2],
    ],
  });
  // PATH gone (a crash after its rename): the files keep their numbers, the oldest past the limit go.
  assert.deepEqual(rotationPlan([1, 2, 3], 1, 2), { remove: [3], moves: [] });
});

test('the file sink retries a failed rotation into contiguous files, writing each line once', async () => {
  const { dir, path } = await tempLog();
  await writeFile(`${path}.1`, 'one\n');
  await writeFile(`${path}.2`, 'two\n');
  const fs = failingRename(2);
  const { sink } = await openLogFile(path, 0, fs);
  try {
    await sink.write(Buffer.from('before\n'));
    await assert.rejects(sink.rotate?.() ?? Promise.resolve(), { code: 'EACCES' });
    // Until the rotation is done the lines go on into the file not yet rotated.
    await sink.write(Buffer.from('meanwhile\n'));
    await sink.rotate?.();
    await sink.write(Buffer.from('after\n'));
  } finally {
    await sink.close();
  }
  assert.deepEqual(await contents(dir), {
    'audit.jsonl': 'after\n',
    'audit.jsonl.1': 'before\nmeanwhile\n',
    'audit.jsonl.2': 'one\n',
    'audit.jsonl.3': 'two\n',
  });
});
