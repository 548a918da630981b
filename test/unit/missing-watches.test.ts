/** `fs/watchMissing` bookkeeping (src/sessions/files/missing-watches.ts) around a session that closes. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DEFAULT_FILE_LIMITS } from '../../src/sessions/files/file-limits.ts';
import { MissingWatches } from '../../src/sessions/files/missing-watches.ts';
import { Checker } from '../../src/sessions/files/path-checker.ts';

test('a watch whose sandbox lookup ends after the session closed is refused, and nothing polls', async () => {
  let stats = 0;
  const backend = { fs: { stat: async () => void stats++ } };
  const watches = new MissingWatches({ backend } as never, { ...DEFAULT_FILE_LIMITS, watchIntervalMs: 10 });
  let lookedUp: (c: Checker) => void = () => undefined;
  const checker = () => new Promise<Checker>((resolve) => (lookedUp = resolve));
  const notifier = { notify: () => true };
  const adding = watches.add('w1', ['/workspace/x'], [], notifier, checker);
  watches.close();
  lookedUp(new Checker({ kind: 'unrestricted' }, 'danger-full-access'));
  await assert.rejects(adding, { code: 'EXEC_ERR_SESSION_DEAD' });
  await new Promise((r) => setTimeout(r, 60));
  assert.equal(stats, 0, 'no poller runs for a session that is gone');
});

test("two clients' watches of one id are their own: neither replaces nor unwatches the other's", async (t) => {
  let there = false;
  const backend = {
    fs: {
      stat: async () => {
        if (!there) throw Object.assign(new Error('gone'), { code: 'ENOENT' });
      },
    },
  };
  const watches = new MissingWatches({ backend } as never, { ...DEFAULT_FILE_LIMITS, watchIntervalMs: 10 });
  t.after(() => watches.close());
  const checker = async () => new Checker({ kind: 'unrestricted' }, 'danger-full-access');
  const told = { a: 0, b: 0 };
  const notifier = (who: 'a' | 'b') => ({
    notify: () => {
      told[who]++;
      return true;
    },
  });
  const a = notifier('a');
  const b = notifier('b');
  await watches.add(1, ['/workspace/x'], [], a, checker);
  await watches.add(1, ['/workspace/x'], [], b, checker);
  assert.equal(watches.remove(1, b), true, 'b drops its own watch 1');
  assert.equal(watches.remove(1, b), false, 'b has no watch 1 any more');
  there = true;
  for (const end = Date.now() + 5000; told.a === 0 && Date.now() < end; ) await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(told, { a: 1, b: 0 }, "a's watch 1 outlived b's, and b is told nothing");
});
