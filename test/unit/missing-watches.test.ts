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
