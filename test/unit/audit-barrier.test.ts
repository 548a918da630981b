/**
 * `AuditLog.settled` and `auditBarrier` (src/audit/audit-barrier.ts): a send goes at once when no
 * audit line is waiting; otherwise it and every later send of the connection wait, in order; a
 * log that fails holds nothing up.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { auditBarrier } from '../../src/audit/audit-barrier.ts';
import { AuditLog } from '../../src/audit/audit-log.ts';
import { silentLogger } from '../../src/logger.ts';
import { Metrics } from '../../src/metrics.ts';

const options = () => ({ server: 'test', version: '0', maxQueueLines: 100, metrics: new Metrics(), log: silentLogger });

test('a send waits for the lines before it; later sends keep their order behind it', async () => {
  let release: () => void = () => undefined;
  let pending: Promise<void> | undefined;
  const barrier = auditBarrier({ settled: () => pending });
  const sent: string[] = [];
  barrier(() => sent.push('a'));
  assert.deepEqual(sent, ['a'], 'nothing to wait for: sent at once');
  pending = new Promise<void>((r) => {
    release = r;
  });
  barrier(() => sent.push('reply'));
  pending = undefined;
  // Nothing of its own to wait for, but behind the reply: an output notification never overtakes it.
  barrier(() => sent.push('output'));
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(sent, ['a'], 'held while the line is not written');
  release();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(sent, ['a', 'reply', 'output']);
  barrier(() => sent.push('b'));
  assert.deepEqual(sent, ['a', 'reply', 'output', 'b'], 'once the turn is over, at once again');
});

test('AuditLog.settled resolves once the lines recorded before it are in the file', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'audit-settled-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, 'audit.jsonl');
  const log = await AuditLog.open(path, options());
  t.after(() => log.close());
  await log.settled();
  assert.equal(log.settled(), undefined, 'every line written: nothing to wait for');
  log.record({ action: 'test.one', actor: { principal: 'test' } });
  const waiting = log.settled();
  assert.ok(waiting !== undefined, 'a line is being written');
  assert.equal(log.settled(), waiting, 'one promise for the same lines');
  await waiting;
  assert.match(await readFile(path, 'utf8'), /"action":"test.one"/);
});

test('a log that cannot be written holds nothing up', async (t) => {
  const log = await AuditLog.open('/dev/full', options());
  t.after(() => log.close());
  log.record({ action: 'test.full', actor: { principal: 'test' } });
  const waiting = log.settled();
  assert.ok(waiting !== undefined);
  // Let go when the write fails, not after the retries.
  await waiting;
  assert.match(log.notReadyReason() ?? '', /cannot be written/);
  log.record({ action: 'test.more', actor: { principal: 'test' } });
  assert.equal(log.settled(), undefined, 'while it fails, answers go without waiting');
});
