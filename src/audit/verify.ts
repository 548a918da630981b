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
 * Hashes are of each line's bytes as they are in the file, never of decoded text (an invalid
 * UTF-8 byte decodes to the same U+FFFD as the three bytes it replaced). The one line allowed
 * to break the chain is a line torn by a crash mid-write that the next `audit.start` declares
 * by its length and SHA-256 (audit-log.ts): reported as torn, not as an edit; a torn line
 * that is edited, or not declared, still fails.
 *
 * What a chain cannot show by itself: a cut at the end (the last lines removed) and an edit of
 * the very last line. docs/security-guarded.md says how to anchor the head elsewhere.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';

const sha256 = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('hex');

export interface VerifyResult {
  readonly ok: boolean;
  readonly lines: number;
  /** 1-based line of the first break. */
  readonly line?: number;
  readonly problem?: string;
  /** SHA-256 of the last line: compare with a copy kept elsewhere to catch a cut at the end. */
  readonly head?: string;
  /** 1-based lines torn by a crash, each declared by the `audit.start` after it. */
  readonly torn?: readonly number[];
}

interface Parsed {
  readonly seq: number;
  readonly prev: string | null;
  readonly action: string;
  /** An `audit.start`'s declaration of the torn line before it. */
  readonly torn?: { readonly bytes?: unknown; readonly sha256?: unknown } | undefined;
}

function parse(bytes: Buffer): Parsed | undefined {
  try {
    const v = JSON.parse(bytes.toString('utf8')) as {
      seq?: unknown;
      prev?: unknown;
      action?: unknown;
      detail?: { torn?: { bytes?: unknown; sha256?: unknown } };
    };
    if (typeof v.seq !== 'number' || typeof v.action !== 'string') return undefined;
    if (v.prev !== null && typeof v.prev !== 'string') return undefined;
    const torn = v.action === 'audit.start' ? v.detail?.torn : undefined;
    return { seq: v.seq, prev: v.prev, action: v.action, torn };
  } catch {
    return undefined;
  }
}

/** The lines of `data`, as written: split at each newline byte, never decoded. */
function splitLines(data: Buffer): Buffer[] {
  const lines: Buffer[] = [];
  let from = 0;
  for (let at = data.indexOf(0x0a); at >= 0; at = data.indexOf(0x0a, from)) {
    lines.push(data.subarray(from, at));
    from = at + 1;
  }
  if (from < data.length) lines.push(data.subarray(from));
  return lines;
}

/** Whether `next` is an `audit.start` declaring `line` (its exact length and SHA-256) torn by a crash. */
function declaredTorn(line: Buffer, next: Parsed | undefined): boolean {
  const torn = next?.torn;
  return torn !== undefined && torn.bytes === line.length && torn.sha256 === sha256(line);
}

/** Verifies the text of a log (lines separated by `\n`, the last one terminated). */
export function verifyText(text: string): VerifyResult {
  return verifyBytes(Buffer.from(text, 'utf8'));
}

/**
 * Verifies a log's bytes as written: each `prev` is checked against the SHA-256 of the raw bytes
 * of the line before, so an edit that is not valid UTF-8 shows too. A line torn by a crash is
 * passed over when the `audit.start` after it declares it; the chain then runs from the line
 * before the torn one to that start.
 */
export function verifyBytes(data: Buffer): VerifyResult {
  const lines = splitLines(data);
  if (lines.length === 0) return { ok: false, lines: 0, line: 1, problem: 'the log is empty' };
  if (data[data.length - 1] !== 0x0a)
    return {
      ok: false,
      lines: lines.length,
      line: lines.length,
      problem: `line ${lines.length} is incomplete (no newline): torn by a crash and not yet declared by a restarted server, or the file was cut`,
    };
  const parsed = lines.map(parse);
  const torn: number[] = [];
  const fail = (line: number, problem: string): VerifyResult => ({ ok: false, lines: lines.length, line, problem });
  let b = -1; // the line the chain runs from
  for (let i = 0; i < lines.length; i++) {
    const n = i + 1;
    const cur = parsed[i];
    if (declaredTorn(lines[i]!, parsed[i + 1])) {
      torn.push(n);
      continue;
    }
    if (cur === undefined) return fail(n, `line ${n} is not an audit line (edited)`);
    const problem = b < 0 ? startProblem(cur, n) : linkProblem(lines, parsed, b, i);
    if (problem !== undefined) return fail(problem.line, problem.text);
    b = i;
  }
  return {
    ok: true,
    lines: lines.length,
    head: sha256(lines[lines.length - 1]!),
    ...(torn.length > 0 ? { torn } : {}),
  };
}

type Problem = { readonly line: number; readonly text: string } | undefined;

function startProblem(cur: Parsed, n: number): Problem {
  if (cur.prev === null && cur.action === 'audit.start') return undefined;
  return {
    line: n,
    text: `line ${n} is not the start of a chain (lines before it were removed, or it was edited)`,
  };
}

/** What is wrong with line `i` following line `b` (the one before, or before a declared torn line). */
function linkProblem(
  lines: readonly Buffer[],
  parsed: ReadonlyArray<Parsed | undefined>,
  b: number,
  i: number,
): Problem {
  const n = i + 1;
  const cur = parsed[i]!;
  const before = parsed[b]!;
  const expected = before.seq + 1;
  if (cur.seq > expected && parsed.slice(i + 1).some((p) => p?.seq === expected))
    return {
      line: n,
      text: `line ${n} is out of order (seq ${cur.seq} where ${expected} belongs; ${expected} comes later)`,
    };
  if (cur.seq > expected) return { line: n, text: `${cur.seq - before.seq - 1} line(s) removed before line ${n}` };
  if (cur.seq <= before.seq) return { line: n, text: `line ${n} is out of order (seq ${cur.seq} after ${before.seq})` };
  if (cur.prev === sha256(lines[b]!)) return undefined;
  const next = lines[i + 1] === undefined ? undefined : parsed[i + 1];
  const selfEdited = next !== undefined && next.prev !== sha256(lines[i]!);
  const edited = selfEdited ? n : b + 1;
  return { line: edited, text: `line ${edited} was edited (the chain breaks at line ${n})` };
}

export async function verifyFile(path: string): Promise<VerifyResult> {
  return verifyBytes(await readFile(path));
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
    for (const line of result.torn ?? [])
      process.stdout.write(`line ${line}: torn by a crash (the audit.start after it declares it)\n`);
    return 0;
  }
  process.stderr.write(`broken at line ${result.line}: ${result.problem}\n`);
  return 1;
}
