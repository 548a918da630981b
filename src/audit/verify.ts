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
 * A file that goes on from a rotated one starts with `audit.rotate`, whose `prev` is the hash
 * of the last line of the file before: alone, that link is reported, not checked; given the
 * files in order (`verify PATH.2 PATH.1 PATH`), each link is checked like any other line's.
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
  /** The file goes on from a rotated one: the first line's `seq` and `prev` (the hash of that one's last line). */
  readonly continues?: { readonly seq: number; readonly prev: string };
  /** The last line's `seq`, which the next file's first line follows. */
  readonly lastSeq?: number;
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
  let start: Parsed | undefined; // the chain's first line
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
    start ??= cur;
    b = i;
  }
  return {
    ok: true,
    lines: lines.length,
    head: sha256(lines[lines.length - 1]!),
    lastSeq: parsed[lines.length - 1]!.seq,
    ...(torn.length > 0 ? { torn } : {}),
    ...(start?.prev != null ? { continues: { seq: start.seq, prev: start.prev } } : {}),
  };
}

type Problem = { readonly line: number; readonly text: string } | undefined;

function startProblem(cur: Parsed, n: number): Problem {
  if (cur.prev === null && cur.action === 'audit.start') return undefined;
  // The first line of a file that goes on from a rotated one; its link is checked across files.
  if (n === 1 && cur.prev !== null && cur.action === 'audit.rotate') return undefined;
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

/** One file's result in a verification of several, oldest first. */
export interface FileResult {
  readonly path: string;
  readonly result: VerifyResult;
}

/**
 * Verifies rotated files given oldest first (`PATH.2 PATH.1 PATH`): each on its own, then each
 * file's first line against the last line of the one before. Stops at the first broken file or link.
 */
export async function verifyFiles(paths: readonly string[]): Promise<FileResult[]> {
  const results: FileResult[] = [];
  for (const path of paths) {
    const result = await verifyFile(path);
    const before = results.at(-1)?.result;
    const link = before === undefined || !result.ok ? undefined : linkBetween(before, result);
    results.push({ path, result: link === undefined ? result : { ...result, ...link } });
    if (!results.at(-1)!.result.ok) break;
  }
  return results;
}

/** Why a file does not go on from `before` (verified intact), or undefined when it does. */
function linkBetween(before: VerifyResult, after: VerifyResult): Partial<VerifyResult> | undefined {
  const fail = (problem: string): Partial<VerifyResult> => ({ ok: false, line: 1, problem });
  if (after.continues === undefined)
    return fail('line 1 starts a new chain (audit.start): it does not go on from the file before');
  if (after.continues.seq !== (before.lastSeq ?? -1) + 1)
    return fail(
      `line 1 has seq ${after.continues.seq} where ${(before.lastSeq ?? -1) + 1} belongs: files missing or out of order`,
    );
  if (after.continues.prev !== before.head)
    return fail('line 1 does not chain to the last line of the file before (that line or this one was edited)');
  return undefined;
}

const USAGE = `Usage: exec-server audit verify PATH...
  Checks the hash chain of an --audit-log file; rotated files oldest first (PATH.2 PATH.1 PATH)
  are checked together, each file's first line against the last line of the one before.
`;

/** `exec-server audit verify PATH...`: 0 intact, 1 broken (naming the file and first line), 2 usage or read error. */
export async function auditCommand(args: readonly string[]): Promise<number> {
  const [sub, ...paths] = args;
  if (sub !== 'verify' || paths.length === 0 || paths.some((p) => p.startsWith('-'))) {
    process.stderr.write(USAGE);
    return sub === '--help' || sub === '-h' ? 0 : 2;
  }
  let results: FileResult[];
  try {
    results = await verifyFiles(paths);
  } catch (err) {
    process.stderr.write(`exec-server audit: cannot read: ${(err as Error).message}\n`);
    return 2;
  }
  const broken = results.find((r) => !r.result.ok);
  if (broken !== undefined) {
    const where = paths.length > 1 ? `${broken.path}: ` : '';
    process.stderr.write(`${where}broken at line ${broken.result.line}: ${broken.result.problem}\n`);
    return 1;
  }
  for (const { path, result } of results) {
    const where = paths.length > 1 ? `${path}: ` : '';
    for (const line of result.torn ?? [])
      process.stdout.write(`${where}line ${line}: torn by a crash (the audit.start after it declares it)\n`);
  }
  const first = results[0]!.result;
  if (first.continues !== undefined)
    process.stdout.write(
      `${paths[0]}: line 1 goes on from a rotated file (seq ${first.continues.seq}, prev ${first.continues.prev}); give that file first to check the link\n`,
    );
  const lines = results.reduce((n, r) => n + r.result.lines, 0);
  const files = paths.length > 1 ? `${paths.length} files, ` : '';
  process.stdout.write(`ok: ${files}${lines} lines, chain intact; head ${results.at(-1)!.result.head}\n`);
  return 0;
}
