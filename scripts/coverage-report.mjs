// Test reporter for scripts/coverage.sh: prints the line coverage of src/ as one figure and a
// per-file table with the uncovered lines.
//
// Lines are lines of code: blank and comment-only lines are not counted. The servers run the
// TypeScript through a transpiler that drops comments, so no coverage range can map to a
// comment, and Node's report counts many comment lines (file headers, TSDoc) as uncovered;
// counting only lines that hold code keeps the figure about code. Files of src/ that no process
// loaded count with all their code lines uncovered (the lines their compiled code maps back to,
// as for a loaded file: declarations of types only are not code), except files of types only
// (they compile to nothing: there is nothing in them to run).
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { transformSync } from 'esbuild';

function sourceFiles(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(p);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [p] : [];
  });
}

/** Characters after which a `/` starts a regular expression rather than a division. */
const BEFORE_REGEX = new Set([...'(,=:[!&|?{};+-*%<>~^', '']);

/** The 1-based numbers of the lines of `text` that hold something besides comments and blanks. */
export function codeLines(text) {
  const lines = new Set();
  let line = 1;
  let last = ''; // last significant character outside comments
  let lastWord = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '\n') {
      line++;
      continue;
    }
    if (c === ' ' || c === '\t' || c === '\r') continue;
    const next = text[i + 1];
    if (c === '/' && next === '/') {
      while (i < text.length && text[i] !== '\n') i++;
      i--;
      continue;
    }
    if (c === '/' && next === '*') {
      i += 2;
      while (i < text.length && !(text[i] === '*' && text[i + 1] === '/')) {
        if (text[i] === '\n') line++;
        i++;
      }
      i++;
      continue;
    }
    lines.add(line);
    if (c === "'" || c === '"' || c === '`' || (c === '/' && (BEFORE_REGEX.has(last) || lastWord === 'return'))) {
      // A string, template or regular expression: skip to its end (template expressions are
      // skipped whole; a line they span counts as code, which it is).
      let depth = 0;
      let inClass = false;
      for (i++; i < text.length; i++) {
        const d = text[i];
        if (d === '\n') {
          line++;
          lines.add(line);
        }
        if (d === '\\') {
          i++;
          continue;
        }
        if (c === '`' && d === '$' && text[i + 1] === '{') depth++;
        else if (c === '`' && depth > 0 && d === '}') depth--;
        else if (c === '/' && d === '[') inClass = true;
        else if (c === '/' && d === ']') inClass = false;
        else if (d === c && depth === 0 && !inClass) break;
      }
      last = c;
      lastWord = '';
      continue;
    }
    if (/[A-Za-z0-9_$]/.test(c)) {
      let j = i;
      while (j < text.length && /[A-Za-z0-9_$]/.test(text[j])) j++;
      lastWord = text.slice(i, j);
      last = 'a';
      i = j - 1;
      continue;
    }
    last = c;
    lastWord = '';
  }
  return lines;
}

const BASE64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

/** The fields of one source-map segment (base64 VLQ): generated column, source, line, column... as deltas. */
export function vlqFields(segment) {
  const fields = [];
  let value = 0;
  let shift = 0;
  for (const ch of segment) {
    const digit = BASE64.indexOf(ch);
    value += (digit & 31) << shift;
    if (digit & 32) shift += 5;
    else {
      fields.push(value & 1 ? -(value >>> 1) : value >>> 1);
      value = 0;
      shift = 0;
    }
  }
  return fields;
}

/** 1-based lines of the original that a source map's mappings point into (the lines that compile to code). */
export function mappedLines(mappings) {
  const lines = new Set();
  let sourceLine = 0;
  for (const segment of mappings.split(/[;,]/)) {
    if (segment === '') continue;
    const fields = vlqFields(segment);
    if (fields.length >= 4) {
      sourceLine += fields[2];
      lines.add(sourceLine + 1);
    }
  }
  return lines;
}

/** `[1, 2, 3, 7]` as `1-3 7`, cut to about `max` characters. */
function ranges(numbers, max = 60) {
  const parts = [];
  for (let i = 0; i < numbers.length; i++) {
    let j = i;
    while (j + 1 < numbers.length && numbers[j + 1] === numbers[j] + 1) j++;
    parts.push(i === j ? `${numbers[i]}` : `${numbers[i]}-${numbers[j]}`);
    i = j;
  }
  const text = parts.join(' ');
  return text.length <= max ? text : `${text.slice(0, text.lastIndexOf(' ', max))} ...`;
}

function row(root, path, nodeLines) {
  const text = readFileSync(join(root, path), 'utf8');
  const code = codeLines(text);
  if (nodeLines === undefined) {
    // Counted like a loaded file: the code lines the compiled output maps back to.
    const out = transformSync(text, { loader: 'ts', sourcemap: 'external', sourcefile: path });
    if (out.code.trim() === '') return undefined;
    const mapped = mappedLines(JSON.parse(out.map).mappings);
    const total = [...code].filter((l) => mapped.has(l)).length;
    return { total, covered: 0, uncovered: '(never loaded)' };
  }
  let total = 0;
  let covered = 0;
  const missed = [];
  for (const { line, count } of nodeLines) {
    if (!code.has(line)) continue;
    total++;
    if (count > 0) covered++;
    else missed.push(line);
  }
  return { total, covered, uncovered: ranges(missed) };
}

export default async function* report(source) {
  let summary;
  let failed = 0;
  for await (const event of source) {
    if (event.type === 'test:coverage') summary = event.data.summary;
    if (event.type === 'test:fail') {
      failed += 1;
      yield `merge failed: ${event.data.details?.error?.message ?? event.data.name}\n`;
    }
  }
  if (summary === undefined) {
    yield failed ? '' : 'no coverage summary (was --experimental-test-coverage given?)\n';
    return;
  }
  const root = process.cwd();
  const measured = new Map();
  for (const f of summary.files) measured.set(relative(root, f.path), f.lines);
  const rows = [];
  for (const p of sourceFiles(join(root, 'src'))) {
    const path = relative(root, p);
    const r = row(root, path, measured.get(path));
    if (r !== undefined) rows.push({ path, ...r });
  }
  rows.sort((a, b) => a.path.localeCompare(b.path));
  const width = Math.max(...rows.map((r) => r.path.length));
  let total = 0;
  let covered = 0;
  const lines = [`${'file'.padEnd(width)}  line %  covered/lines  uncovered lines`];
  for (const r of rows) {
    total += r.total;
    covered += r.covered;
    const pct = r.total === 0 ? 100 : (100 * r.covered) / r.total;
    const counts = `${String(r.covered).padStart(5)}/${String(r.total).padEnd(5)}`;
    lines.push(`${r.path.padEnd(width)}  ${pct.toFixed(2).padStart(6)}  ${counts.padEnd(13)}  ${r.uncovered}`);
  }
  yield `${lines.join('\n')}\n`;
  const pct = total === 0 ? 0 : (100 * covered) / total;
  const own = summary.totals.coveredLinePercent;
  yield `(Node's own count, loaded files only, blank and comment lines included: ${own.toFixed(2)} %)\n`;
  yield `line coverage of src/: ${pct.toFixed(2)} % (${covered} of ${total} lines of code, ${rows.length} files)\n`;
}
