/**
 * Checks an audit log's hash chain (audit-log.ts): every line is JSON, the first line of the
 * file is an `audit.start` without `prev`, each later line's `prev` is the SHA-256 of the line
 * before it and its `seq` follows that line's. The first break is named by its 1-based line:
 *
 * - a `seq` that jumps ahead: lines were removed before it, or reordered when the missing `seq`
 *   comes later in the file;
 * - a `seq` that goes back: lines were reordered;
 * - a `prev` that does not match with `seq` in order: a line was edited. Which one: when the
 *   next line does not chain to line N either, N itself changed; else line N-1 did.
 *
 * What a chain cannot show by itself: a cut at the end (the last lines removed) and an edit of
 * the very last line. docs/security-guarded.md says how to anchor the head elsewhere.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';

const sha256 = (line: string): string => createHash('sha256').update(line).digest('hex');

export interface VerifyResult {
  readonly ok: boolean;
  readonly lines: number;
  /** 1-based line of the first break. */
  readonly line?: number;
  readonly problem?: string;
  /** SHA-256 of the last line: compare with a copy kept elsewhere to catch a cut at the end. */
  readonly head?: string;
}

interface Parsed {
  readonly seq: number;
  readonly prev: string | null;
  readonly action: string;
}

function parse(text: string): Parsed | undefined {
  try {
    const v = JSON.parse(text) as { seq?: unknown; prev?: unknown; action?: unknown };
    if (typeof v.seq !== 'number' || typeof v.action !== 'string') return undefined;
    if (v.prev !== null && typeof v.prev !== 'string') return undefined;
    return { seq: v.seq, prev: v.prev, action: v.action };
  } catch {
    return undefined;
  }
}

/** Verifies the text of a log (lines separated by `\n`, the last one terminated). */
export function verifyText(text: string): VerifyResult {
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  else if (lines.length > 0)
    return { ok: false, lines: lines.length, line: lines.length, problem: 'the last line is incomplete (no newline)' };
  if (lines.length === 0) return { ok: false, lines: 0, line: 1, problem: 'the log is empty' };
  const parsed = lines.map(parse);
  for (let i = 0; i < lines.length; i++) {
    const n = i + 1;
    const cur = parsed[i];
    if (cur === undefined)
      return { ok: false, lines: lines.length, line: n, problem: `line ${n} is not an audit line (edited)` };
    if (i === 0) {
      if (cur.prev !== null || cur.action !== 'audit.start')
        return {
          ok: false,
          lines: lines.length,
          line: 1,
          problem: 'line 1 is not the start of a chain (lines before it were removed, or it was edited)',
        };
      continue;
    }
    const before = parsed[i - 1]!;
    const expected = before.seq + 1;
    if (cur.seq > expected && parsed.slice(i + 1).some((p) => p?.seq === expected))
      return {
        ok: false,
        lines: lines.length,
        line: n,
        problem: `line ${n} is out of order (seq ${cur.seq} where ${expected} belongs; ${expected} comes later)`,
      };
    if (cur.seq > expected)
      return {
        ok: false,
        lines: lines.length,
        line: n,
        problem: `${cur.seq - before.seq - 1} line(s) removed before line ${n}`,
      };
    if (cur.seq <= before.seq)
      return {
        ok: false,
        lines: lines.length,
        line: n,
        problem: `line ${n} is out of order (seq ${cur.seq} after ${before.seq})`,
      };
    if (cur.prev !== sha256(lines[i - 1]!)) {
      const next = lines[i + 1] === undefined ? undefined : parsed[i + 1];
      const selfEdited = next !== undefined && next.prev !== sha256(lines[i]!);
      const edited = selfEdited ? n : n - 1;
      return {
        ok: false,
        lines: lines.length,
        line: edited,
        problem: `line ${edited} was edited (the chain breaks at line ${n})`,
      };
    }
  }
  return { ok: true, lines: lines.length, head: sha256(lines[lines.length - 1]!) };
}

export async function verifyFile(path: string): Promise<VerifyResult> {
  return verifyText(await readFile(path, 'utf8'));
}

/** `exec-server audit verify PATH`: 0 intact, 1 broken (naming the first line), 2 usage or read error. */
export async function auditCommand(args: readonly string[]): Promise<number> {
  const [sub, path] = args;
  if (sub !== 'verify' || path === undefined || args.length !== 2) {
    process.stderr.write('Usage: exec-server audit verify PATH\n  Checks the hash chain of an --audit-log file.\n');
    return sub === '--help' || sub === '-h' ? 0 : 2;
  }
  let result: VerifyResult;
  try {
    result = await verifyFile(path);
  } catch (err) {
    process.stderr.write(`exec-server audit: cannot read ${path}: ${(err as Error).message}\n`);
    return 2;
  }
  if (result.ok) {
    process.stdout.write(`ok: ${result.lines} lines, chain intact; head ${result.head}\n`);
    return 0;
  }
  process.stderr.write(`broken at line ${result.line}: ${result.problem}\n`);
  return 1;
}
