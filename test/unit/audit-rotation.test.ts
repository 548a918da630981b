/**
 * Rotation of a file audit log (src/audit/log-file.ts, audit-log.ts, verify.ts): each file stays
 * within its size, the chain goes on across files from an `audit.rotate` line, the oldest past
 * the kept count is removed, a server finding the log missing after a rotation goes on from
 * `PATH.1`, and `verifyFiles` checks the links between files (a missing, reordered or edited one).
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { AuditLog } from '../../src/audit/audit-log.ts';
import { verifyFile, verifyFiles } from '../../src/audit/verify.ts';
import { loadConfig } from '../../src/config.ts';
import { silentLogger } from '../../src/logger.ts';
import { Metrics } from '../../src/metrics.ts';

const MAX = 4096;

const open = (path: string, maxFileBytes: number, maxFiles: number): Promise<AuditLog> =>
  AuditLog.open(path, {
    server: 'h/t',
    version: '0',
    maxQueueLines: 10_000,
    maxFileBytes,
    maxFiles,
    metrics: new Metrics(),
    log: silentLogger,
  });

async function tempLog(): Promise<{ dir: string; path: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'audit-rotation-'));
  return { dir, path: join(dir, 'audit.jsonl') };
}

/** Writes `count` events of about 200 bytes each and closes the log. */
async function fill(path: string, count: number, maxFileBytes = MAX, maxFiles = 0): Promise<void> {
  const log = await open(path, maxFileBytes, maxFiles);
  for (let i = 0; i < count; i++)
    log.record({ action: 'process.stdin', session: 's', detail: { processId: `p${i}`, pad: 'x'.repeat(150) } });
  await log.close();
}

const parse = (line: string): { seq: number; action: string; prev: string | null } => JSON.parse(line);

async function linesOf(path: string): Promise<ReturnType<typeof parse>[]> {
  return (await readFile(path, 'utf8')).trimEnd().split('\n').map(parse);
}

test('each file stays within its size; the chain goes on across files from audit.rotate, seq unbroken', async () => {
  const { dir, path } = await tempLog();
  await fill(path, 200);
  const names = (await readdir(dir)).filter((n) => n.startsWith('audit.jsonl')).sort();
  const rotated = names.filter((n) => /\.\d+$/.test(n)).length;
  assert.ok(rotated >= 8, names.join(' '));
  const files = [...Array.from({ length: rotated }, (_, i) => `${path}.${rotated - i}`), path];
  let seq = 0;
  for (const [i, file] of files.entries()) {
    assert.ok((await stat(file)).size <= MAX, file);
    const lines = await linesOf(file);
    assert.equal(lines[0]?.action, i === 0 ? 'audit.start' : 'audit.rotate', file);
    for (const line of lines) assert.equal(line.seq, seq++);
    const alone = await verifyFile(file);
    assert.equal(alone.ok, true, alone.problem);
    assert.equal(alone.continues !== undefined, i > 0);
  }
  const all = await verifyFiles(files);
  assert.equal(all.length, files.length);
  assert.ok(
    all.every((r) => r.result.ok),
    JSON.stringify(all.find((r) => !r.result.ok)),
  );
  assert.equal((await linesOf(path)).at(-1)?.action, 'audit.stop', 'the last line of the newest file is the stop');
});

test('past --audit-log-max-files the oldest file is removed; 0 keeps every one', async () => {
  const { dir, path } = await tempLog();
  await fill(path, 200, MAX, 3);
  const names = (await readdir(dir)).filter((n) => n.startsWith('audit.jsonl.') && !n.endsWith('.lock')).sort();
  assert.deepEqual(names, ['audit.jsonl.1', 'audit.jsonl.2', 'audit.jsonl.3']);
  const kept = await verifyFiles([`${path}.3`, `${path}.2`, `${path}.1`, path]);
  assert.ok(kept.every((r) => r.result.ok));
  // The oldest kept file starts with audit.rotate: alone it says what it goes on from.
  assert.equal((await linesOf(`${path}.3`))[0]?.action, 'audit.rotate');
});

test('a server finding the log gone after a rotation goes on from PATH.1: audit.rotate, then audit.start', async () => {
  const { path } = await tempLog();
  await fill(path, 5, 0);
  // A crash between the rename of PATH and the first line of the new one.
  await rename(path, `${path}.1`);
  await fill(path, 3, 0);
  const lines = await linesOf(path);
  assert.deepEqual(
    lines.slice(0, 2).map((l) => l.action),
    ['audit.rotate', 'audit.start'],
  );
  const before = await linesOf(`${path}.1`);
  assert.equal(lines[0]?.seq, (before.at(-1)?.seq ?? -1) + 1);
  const both = await verifyFiles([`${path}.1`, path]);
  assert.ok(
    both.every((r) => r.result.ok),
    JSON.stringify(both),
  );
});

test('verifyFiles names a missing file, files out of order, an edited last line and a second chain', async () => {
  const { dir, path } = await tempLog();
  await fill(path, 120);
  const files = [`${path}.3`, `${path}.2`, `${path}.1`, path];
  const broken = async (paths: string[]): Promise<{ path: string; problem: string }> => {
    const results = await verifyFiles(paths);
    const bad = results.find((r) => !r.result.ok);
    assert.ok(bad, `expected a break in ${paths.join(' ')}`);
    return { path: bad.path, problem: bad.result.problem ?? '' };
  };
  const missing = await broken([files[0]!, files[2]!, files[3]!]);
  assert.equal(missing.path, files[2]);
  assert.match(missing.problem, /files missing or out of order/);
  const swapped = await broken([files[1]!, files[0]!, files[2]!, files[3]!]);
  assert.match(swapped.problem, /files missing or out of order/);
  // An edit of a file's last line: that file alone cannot show it, the next one's link does.
  const text = await readFile(files[1]!, 'utf8');
  const edited = join(dir, 'edited');
  await writeFile(edited, text.replace(/"p(\d+)"(?![\s\S]*"p\d+")/, '"q$1"'));
  assert.equal((await verifyFile(edited)).ok, true);
  const link = await broken([files[0]!, edited, files[2]!, files[3]!]);
  assert.equal(link.path, files[2]);
  assert.match(link.problem, /does not chain to the last line of the file before/);
  // A log that starts a chain of its own does not go on from another.
  const other = (await tempLog()).path;
  await fill(other, 3, 0);
  const fresh = await broken([files[2]!, other]);
  assert.match(fresh.problem, /starts a new chain/);
  // Alone, a file that starts with anything but audit.start or audit.rotate still fails.
  const cut = join(dir, 'cut');
  await writeFile(cut, (await readFile(path, 'utf8')).split('\n').slice(1).join('\n'));
  assert.match((await verifyFile(cut)).problem ?? '', /not the start of a chain/);
});

test('--audit-log-max-bytes is 0 or at least 1 MiB; the defaults rotate at 100 MiB and keep every file', () => {
  const defaults = loadConfig([], {});
  assert.equal(defaults.auditLogMaxBytes, 100 * 1024 * 1024);
  assert.equal(defaults.auditLogMaxFiles, 0);
  assert.equal(loadConfig(['--audit-log-max-bytes', '0'], {}).auditLogMaxBytes, 0);
  assert.equal(loadConfig(['--audit-log-max-bytes', '1048576'], {}).auditLogMaxBytes, 1048576);
  assert.throws(
    () => loadConfig(['--audit-log-max-bytes', '65536'], {}),
    /--audit-log-max-bytes \/ EXEC_SERVER_AUDIT_LOG_MAX_BYTES: must be 0 \(never rotate\) or at least 1048576, got 65536/,
  );
  assert.throws(() => loadConfig(['--audit-log-max-files', '-1'], {}), /--audit-log-max-files/);
});
