/**
 * `audit verify` (src/audit/verify.ts) on logs built here byte by byte: it hashes each line's
 * bytes as written (an edit that is not valid UTF-8 shows), and passes over a line torn by a
 * crash exactly when the next `audit.start` declares it, by its length and SHA-256.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { verifyBytes } from '../../src/audit/verify.ts';

const ROOT = new URL('../..', import.meta.url).pathname;
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

interface Entry {
  readonly action: string;
  readonly detail?: Record<string, unknown>;
}

/** Appends audit lines chained to `lines` (the last one, or none: a new chain). */
function extend(lines: Buffer[], entries: readonly Entry[], after: Buffer | undefined = lines.at(-1)): Buffer[] {
  let prev = after;
  let seq = prev === undefined ? 0 : (JSON.parse(prev.toString()) as { seq: number }).seq + 1;
  for (const e of entries) {
    const line = Buffer.from(
      JSON.stringify({
        seq: seq++,
        time: '2026-01-01T00:00:00.000Z',
        tenant: null,
        principal: 'server',
        remote: null,
        session: null,
        action: e.action,
        detail: e.detail ?? {},
        prev: prev === undefined ? null : sha(prev),
      }),
    );
    lines.push(line);
    prev = line;
  }
  return lines;
}

const file = (lines: readonly Buffer[]): Buffer => Buffer.concat(lines.flatMap((l) => [l, Buffer.from('\n')]));
const start: Entry = { action: 'audit.start', detail: { server: 'h/default', continues: false } };

test('a byte edit that is not valid UTF-8 breaks the chain: lines are hashed as written', async () => {
  const lines = extend([], [start, { action: 'process.start', detail: { argv: ['echo', '\ufffd'] } }, { action: 'x' }]);
  assert.equal(verifyBytes(file(lines)).ok, true);
  const at = lines[1]!.indexOf(Buffer.from('\ufffd'));
  assert.ok(at > 0);
  // EF BF BD becomes FF, which decodes to the same U+FFFD: decoded text would not show it.
  const edited = Buffer.concat([lines[1]!.subarray(0, at), Buffer.from([0xff]), lines[1]!.subarray(at + 3)]);
  assert.equal(edited.toString('utf8'), lines[1]!.toString('utf8'));
  const result = verifyBytes(file([lines[0]!, edited, lines[2]!]));
  assert.equal(result.ok, false);
  assert.match(result.problem ?? '', /line 2 was edited/);
  // The command reads the file's bytes too.
  const dir = await mkdtemp(join(tmpdir(), 'audit-verify-'));
  await writeFile(join(dir, 'edited.jsonl'), file([lines[0]!, edited, lines[2]!]));
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', 'src/main.ts', 'audit', 'verify', join(dir, 'edited.jsonl')],
    {
      cwd: ROOT,
      encoding: 'utf8',
    },
  );
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /broken at line 2: line 2 was edited/);
});

/** start, a, b, then a torn line (the first `cut` bytes of c), then a restarted server's start and d. */
function tornLog(cut = 40): { lines: Buffer[]; torn: Buffer } {
  const lines = extend([], [start, { action: 'a' }, { action: 'b' }]);
  const c = extend([...lines], [{ action: 'c', detail: { pad: 'x'.repeat(80) } }]).at(-1)!;
  const torn = c.subarray(0, cut);
  const restart: Entry = {
    action: 'audit.start',
    detail: { server: 'h/default', continues: true, torn: { bytes: torn.length, sha256: sha(torn) } },
  };
  const after = extend([...lines], [restart, { action: 'd' }]).slice(3);
  return { lines: [...lines, torn, ...after], torn };
}

test('a torn line declared by the next audit.start passes, reported as torn by a crash', () => {
  const { lines } = tornLog();
  const result = verifyBytes(file(lines));
  assert.equal(result.ok, true, result.problem);
  assert.deepEqual(result.torn, [4]);
  assert.equal(result.lines, 6);
  // Torn before any complete line (the first write of a new log): the declaring start begins the chain.
  const first = Buffer.from('{"seq":0,"time":"2026');
  const declared = extend(
    [],
    [{ action: 'audit.start', detail: { continues: false, torn: { bytes: first.length, sha256: sha(first) } } }],
  );
  assert.deepEqual(verifyBytes(file([first, ...declared])).torn, [1]);
});

test('a torn line that is edited, undeclared, or declared by a line that does not chain still fails', () => {
  const { lines, torn } = tornLog();
  const flipped = Buffer.from(torn);
  flipped[10] = flipped[10] === 0x41 ? 0x42 : 0x41;
  const cases: Array<[string, Buffer[], RegExp]> = [
    ['torn bytes edited', lines.map((l, i) => (i === 3 ? flipped : l)), /line 4 is not an audit line/],
    ['torn line longer', lines.map((l, i) => (i === 3 ? Buffer.concat([torn, Buffer.from('x')]) : l)), /line 4/],
    ['a complete line removed before it', lines.filter((_, i) => i !== 2), /line 3 is not an audit line|removed/],
  ];
  // Declared, but the start goes on from a line other than the one before the torn line.
  const wrongLink = extend([], [start, { action: 'a' }, { action: 'b' }]);
  const restart = extend(
    [...wrongLink],
    [{ action: 'audit.start', detail: { torn: { bytes: torn.length, sha256: sha(torn) } } }],
    wrongLink[1],
  ).at(-1)!;
  cases.push(['the start chains past a line', [...wrongLink, torn, restart], /line 5/]);
  // Undeclared: a restarted server's start without `torn`.
  const plain = extend([...lines.slice(0, 3)], [{ action: 'audit.start', detail: {} }]);
  cases.push(['not declared', [...lines.slice(0, 3), torn, plain[3]!], /line 4 is not an audit line/]);
  for (const [what, broken, problem] of cases) {
    const result = verifyBytes(file(broken));
    assert.equal(result.ok, false, what);
    assert.match(result.problem ?? '', problem, what);
  }
  // Still torn at the end (no restart yet): named as such, not passed.
  const open = verifyBytes(Buffer.concat([file(lines.slice(0, 3)), torn]));
  assert.equal(open.ok, false);
  assert.match(open.problem ?? '', /line 4 is incomplete .*torn by a crash/);
});
