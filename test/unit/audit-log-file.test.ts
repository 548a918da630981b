/**
 * The audit log's file (src/audit/): every line within MAX_LINE_BYTES, a restart chaining onto a
 * last line of any length, a torn last line declared by the next `audit.start` on a line of its
 * own, and one writer per log (the lock next to it, stale once its server is gone).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, stat, symlink, truncate, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { AuditLog } from '../../src/audit/audit-log.ts';
import { boundedLine, MAX_LINE_BYTES, type AuditRecord } from '../../src/audit/line-bound.ts';
import { processStartTime } from '../../src/audit/log-lock.ts';
import { verifyBytes } from '../../src/audit/verify.ts';
import { silentLogger } from '../../src/logger.ts';
import { Metrics } from '../../src/metrics.ts';

const sha = (b: Buffer | string): string => createHash('sha256').update(b).digest('hex');

const open = (path: string): Promise<AuditLog> =>
  AuditLog.open(path, { server: 'h/t', version: '0', maxQueueLines: 100, metrics: new Metrics(), log: silentLogger });

async function tempLog(): Promise<string> {
  return join(await mkdtemp(join(tmpdir(), 'audit-file-')), 'audit.jsonl');
}

const rawLines = (data: Buffer): Buffer[] => {
  const out: Buffer[] = [];
  for (let from = 0, at = data.indexOf(10); at >= 0; from = at + 1, at = data.indexOf(10, from))
    out.push(data.subarray(from, at));
  return out;
};

const record = (detail: Record<string, unknown>): AuditRecord => ({
  seq: 7,
  time: '2026-01-01T00:00:00.000Z',
  tenant: 'acme',
  principal: 'tenant:acme',
  remote: '127.0.0.1',
  session: 's',
  action: 'process.start',
  detail,
  prev: 'a'.repeat(64),
});

test('a line that fits is whole; a longer one has its strings cut, saying how much, within MAX_LINE_BYTES', () => {
  const small = record({ argv: ['echo', 'hi'], cwd: '/w' });
  assert.equal(boundedLine(small), JSON.stringify(small));
  const big = 'x'.repeat(100_000);
  const line = boundedLine(record({ processId: 'big', argv: ['sh', '-c', 'sleep 1', big, big, `é${big}`] }));
  assert.ok(Buffer.byteLength(line) <= MAX_LINE_BYTES);
  const v = JSON.parse(line) as { detail: { processId: string; argv: string[]; cut: Record<string, number> } };
  assert.equal(v.detail.processId, 'big');
  assert.deepEqual(v.detail.argv.slice(0, 3), ['sh', '-c', 'sleep 1']);
  let cutBytes = 0;
  for (const [i, arg] of v.detail.argv.slice(3).entries()) {
    const m = /^(.*)…\[cut (\d+) bytes\]$/su.exec(arg);
    assert.ok(m, arg.slice(-40));
    const original = i === 2 ? `é${big}` : big;
    assert.ok(original.startsWith(m[1]!));
    assert.equal(Buffer.byteLength(m[1]!) + Number(m[2]), Buffer.byteLength(original));
    cutBytes += Number(m[2]);
  }
  assert.deepEqual(v.detail.cut, { strings: 3, bytes: cutBytes, items: 0 });
});

test('many items, or a detail no step makes fit, still give a line within MAX_LINE_BYTES', () => {
  const many = boundedLine(record({ argv: Array.from({ length: 100_000 }, (_, i) => `a${i}`) }));
  assert.ok(Buffer.byteLength(many) <= MAX_LINE_BYTES);
  const cut = (JSON.parse(many) as { detail: { cut: { items: number } } }).detail.cut;
  assert.ok(cut.items > 90_000, JSON.stringify(cut));
  // Nested wide enough that even the last step (32 items of 128 bytes) is too long: size and hash only.
  const row = Array.from({ length: 40 }, () => 'y'.repeat(200));
  const detail = { table: Array.from({ length: 40 }, () => row) };
  const last = boundedLine(record(detail));
  assert.ok(Buffer.byteLength(last) <= MAX_LINE_BYTES);
  const text = JSON.stringify(detail);
  assert.deepEqual((JSON.parse(last) as { detail: unknown }).detail, {
    cut: { strings: 0, bytes: 0, items: 0, all: { bytes: Buffer.byteLength(text), sha256: sha(text) } },
  });
});

test('the log written by AuditLog keeps every line within MAX_LINE_BYTES and verifies', async () => {
  const path = await tempLog();
  const log = await open(path);
  log.record({ action: 'process.start', detail: { argv: ['sh', 'x'.repeat(300_000)] } });
  await log.close();
  const data = await readFile(path);
  for (const line of rawLines(data)) assert.ok(line.length <= MAX_LINE_BYTES, `${line.length} bytes`);
  assert.equal(verifyBytes(data).ok, true);
});

test('a restart chains onto a last line longer than any read of a fixed size (a log of an earlier version)', async () => {
  const path = await tempLog();
  const first = JSON.stringify({
    seq: 0,
    time: 't',
    tenant: null,
    principal: 'server',
    remote: null,
    session: null,
    action: 'audit.start',
    detail: {},
    prev: null,
  });
  const long = JSON.stringify({
    seq: 1,
    time: 't',
    tenant: null,
    principal: 'p',
    remote: null,
    session: null,
    action: 'process.start',
    detail: { argv: ['x'.repeat(600_000)] },
    prev: sha(first),
  });
  await writeFile(path, `${first}\n${long}\n`);
  const log = await open(path);
  await log.close();
  const data = await readFile(path);
  const result = verifyBytes(data);
  assert.equal(result.ok, true, result.problem);
  const restart = JSON.parse(rawLines(data)[2]!.toString()) as {
    seq: number;
    prev: string;
    detail: { continues: boolean };
  };
  assert.equal(restart.seq, 2);
  assert.equal(restart.prev, sha(long));
  assert.equal(restart.detail.continues, true);
});

test('after a torn last line the new audit.start is on a line of its own, chained to the last whole line, declaring the torn one', async () => {
  const path = await tempLog();
  const log = await open(path);
  log.record({ action: 'session.create', detail: { image: 'i' } });
  await log.close();
  await truncate(path, (await stat(path)).size - 15);
  const torn = rawLines(Buffer.concat([await readFile(path), Buffer.from('\n')])).at(-1)!;
  await (await open(path)).close();
  const data = await readFile(path);
  const lines = rawLines(data);
  assert.equal(lines.length, 5);
  assert.deepEqual(lines[2], torn);
  const restart = JSON.parse(lines[3]!.toString()) as {
    seq: number;
    prev: string;
    action: string;
    detail: Record<string, unknown>;
  };
  assert.equal(restart.action, 'audit.start');
  assert.equal(restart.seq, 2, 'the torn line was seq 2: its number goes to the start after it');
  assert.equal(restart.prev, sha(lines[1]!));
  assert.deepEqual(restart.detail['torn'], { bytes: torn.length, sha256: sha(torn) });
  const result = verifyBytes(data);
  assert.equal(result.ok, true, result.problem);
  assert.deepEqual(result.torn, [3]);
});

test('one writer per log: a second open fails naming the first, the lock goes with close', async () => {
  const path = await tempLog();
  const first = await open(path);
  await assert.rejects(open(path), (err: Error & { code?: string }) => {
    assert.equal(err.code, 'EXEC_ERR_CONFIG');
    assert.match(err.message, new RegExp(`one writer: another server writes it \\(pid ${process.pid},`));
    return true;
  });
  // The same file by another name is the same log.
  const alias = join(await mkdtemp(join(tmpdir(), 'audit-alias-')), 'alias.jsonl');
  await symlink(path, alias);
  await assert.rejects(open(alias), /one writer/);
  await first.close();
  await assert.rejects(stat(`${path}.lock`), { code: 'ENOENT' });
  await (await open(alias)).close();
  const data = await readFile(path);
  assert.equal(verifyBytes(data).ok, true);
  assert.equal(rawLines(data).filter((l) => l.includes('"audit.start"')).length, 2);
});

test("a lock whose server is gone is taken over; a live one, another host's or an unreadable one is not", async () => {
  const path = await tempLog();
  const lock = `${path}.lock`;
  const holder = (pid: number, started?: string, host = hostname()) =>
    writeFile(lock, JSON.stringify({ pid, host, started, since: '2026-01-01T00:00:00.000Z' }));
  const gone = spawnSync('true').pid;
  const ours = async () => {
    await (await open(path)).close();
    await assert.rejects(stat(lock), { code: 'ENOENT' });
  };
  await holder(gone);
  await ours();
  // A live pid that is now another process (it started at another time), or this process's own pid not held here.
  await holder(process.ppid, '1');
  await ours();
  await holder(process.pid, '1');
  await ours();
  await holder(process.ppid, processStartTime(process.ppid));
  await assert.rejects(open(path), new RegExp(`another server writes it \\(pid ${process.ppid},`));
  await holder(process.ppid, undefined, 'other-host');
  await assert.rejects(open(path), new RegExp(`a server on host other-host holds its lock .*remove ${lock}`));
  await writeFile(lock, JSON.stringify({ pid: 0, host: hostname(), since: 'x' }));
  await assert.rejects(open(path), /names no server/);
  await writeFile(lock, '');
  await assert.rejects(open(path), new RegExp(`names no server; if no server writes the log, remove ${lock}`));
  assert.equal(verifyBytes(await readFile(path)).ok, true);
});
