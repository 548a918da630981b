/**
 * A write of the audit log that fails part-way (disk full mid-batch): the bytes that made it
 * are cut before the retry, so the log holds whole lines only and `audit verify` passes it,
 * rather than reporting the crash of a disk as an edit. Forced on the file sink, then on a real
 * full filesystem (a small tmpfs, mounted as root).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, open as openFile, readFile, rm, stat, writeFile, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { AuditLog } from '../../src/audit/audit-log.ts';
import { openLogFile } from '../../src/audit/log-file.ts';
import { verifyBytes } from '../../src/audit/verify.ts';
import { silentLogger } from '../../src/logger.ts';
import { Metrics } from '../../src/metrics.ts';

async function tempLog(): Promise<string> {
  return join(await mkdtemp(join(tmpdir(), 'audit-partial-')), 'audit.jsonl');
}

const enospc = (): Error =>
  Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28 });

/**
 * Makes the next `failures` appends of any file handle write only their first `keep` bytes and
 * fail as a full disk does; returns the restore.
 */
async function failAppendsAfter(keep: number, failures = 1): Promise<() => void> {
  const probe = await openFile(new URL(import.meta.url).pathname, 'r');
  const proto = Object.getPrototypeOf(probe) as FileHandle;
  await probe.close();
  const original = proto.appendFile;
  let left = failures;
  proto.appendFile = async function (this: FileHandle, data: Parameters<FileHandle['appendFile']>[0]) {
    if (left <= 0 || !Buffer.isBuffer(data)) return original.call(this, data);
    left--;
    await this.write(data.subarray(0, keep));
    throw enospc();
  };
  return () => {
    proto.appendFile = original;
  };
}

test('the file sink cuts what a failed write left before the next one: the file is whole lines', async () => {
  const path = await tempLog();
  const { sink } = await openLogFile(path);
  try {
    await sink.write(Buffer.from('{"first":1}\n'));
    const restore = await failAppendsAfter(5, 2);
    try {
      await assert.rejects(sink.write(Buffer.from('{"second":2}\n{"third":3}\n')), { code: 'ENOSPC' });
      assert.equal((await readFile(path, 'utf8')).length, 12, 'cut at once');
      await assert.rejects(sink.write(Buffer.from('{"second":2}\n{"third":3}\n')), { code: 'ENOSPC' });
    } finally {
      restore();
    }
    await sink.write(Buffer.from('{"second":2}\n{"third":3}\n'));
    assert.equal(await readFile(path, 'utf8'), '{"first":1}\n{"second":2}\n{"third":3}\n');
  } finally {
    await sink.close();
  }
});

test('an AuditLog whose write fails part-way retries without gluing lines: verify passes', async () => {
  const path = await tempLog();
  const metrics = new Metrics();
  const restore = await failAppendsAfter(40);
  try {
    const log = await AuditLog.open(path, {
      server: 'h/t',
      version: '0',
      maxQueueLines: 100,
      metrics,
      log: silentLogger,
    });
    log.record({ action: 'session.create', detail: { image: 'i' } });
    await log.close();
  } finally {
    restore();
  }
  assert.match(await metrics.registry.metrics(), /exec_server_audit_write_errors_total 1/);
  const data = await readFile(path);
  const result = verifyBytes(data);
  assert.equal(result.ok, true, result.problem);
  const actions = data
    .toString()
    .trimEnd()
    .split('\n')
    .map((l) => (JSON.parse(l) as { action: string }).action);
  assert.deepEqual(actions, ['audit.start', 'session.create', 'audit.stop']);
});

const asRoot = process.getuid?.() === 0 || process.env['CI'] === 'true' ? {} : { skip: 'needs root (mount)' };

test('a log on a filesystem that fills up mid-line verifies once space is back', asRoot, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'audit-tmpfs-'));
  const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', dir], { encoding: 'utf8' });
  assert.equal(mounted.status, 0, mounted.stderr);
  t.after(async () => {
    spawnSync('umount', [dir]);
    await rm(dir, { recursive: true, force: true });
  });
  const path = join(dir, 'audit.jsonl');
  const metrics = new Metrics();
  const log = await AuditLog.open(path, {
    server: 'h/t',
    version: '0',
    maxQueueLines: 100,
    metrics,
    log: silentLogger,
  });
  const deadline = Date.now() + 5000;
  while ((await stat(path)).size === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  // Every free page to a filler: the log keeps only the rest of its last page.
  const filler = join(dir, 'filler');
  await writeFile(filler, Buffer.alloc(128 * 1024)).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOSPC') throw err;
  });
  log.record({ action: 'process.start', detail: { argv: ['sh', 'x'.repeat(8000)] } });
  while (!/exec_server_audit_write_errors_total [1-9]/.test(await metrics.registry.metrics()))
    await new Promise((r) => setTimeout(r, 10));
  await rm(filler);
  await log.close();
  const data = await readFile(path);
  const result = verifyBytes(data);
  assert.equal(result.ok, true, result.problem);
  assert.equal(data.toString().trimEnd().split('\n').length, 3);
});
