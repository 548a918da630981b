#!/usr/bin/env node
/**
 * Size check: files over 400 lines and functions over 80 lines are reported and fail the check.
 * Run by `npm run lint` and by test/unit/check-size.test.ts.
 *
 * - File length: TypeScript and JavaScript (.ts .tsx .mts .mjs) in src/, web/src/, bench/,
 *   scripts/ and test/; C in native/ (.c, .h); Python in clients/python/ and bench/ (.py).
 * - Function length, from a function's signature to its closing brace, nested functions
 *   included: the same TypeScript/JavaScript files and native C; not Python.
 * - In test files (`*.test.ts`, `*.test.mjs`), the functions passed to describe/test/it (and
 *   subtests' `t.test`) are not measured: a suite is a list of cases, not one function. Named
 *   functions there, and any other callback (hooks, `map`), are.
 *
 * How the functions are found: scripts/lib/size-scan.mjs.
 *
 * Usage: node scripts/check-size.mjs [--json]
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cFunctions, scriptFunctions } from './lib/size-scan.mjs';

export const MAX_FILE_LINES = 400;
export const MAX_FUNCTION_LINES = 80;

/**
 * Files let past the check, each with why (saying when it is split). Their findings are still
 * printed, and an allowed file that passes is itself a finding, so the entry goes once it is split.
 * None now: the last ones (native/exec-agent.c, native/pty-relay.c) were split into modules.
 */
export const ALLOWED = new Map();

/** Files not measured at all, each with why. */
export const EXEMPT = new Map([
  [
    'clients/python/exec_server/_generated.py',
    'written by scripts/gen-python-sdk.ts from the server tables (error registry, schemas): its length is theirs',
  ],
]);

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SCRIPT = /\.(ts|tsx|mts|mjs)$/;

/** Where to look: a directory, which file names, and whether to go into its subdirectories. */
const TARGETS = [
  { dir: 'src', names: SCRIPT, recursive: true },
  { dir: 'web/src', names: SCRIPT, recursive: true },
  { dir: 'bench', names: SCRIPT, recursive: true },
  { dir: 'scripts', names: SCRIPT, recursive: true },
  { dir: 'test', names: SCRIPT, recursive: true },
  { dir: 'native', names: /\.[ch]$/, recursive: false },
  { dir: 'clients/python', names: /\.py$/, recursive: true },
  { dir: 'bench', names: /\.py$/, recursive: false },
];

/** Directories that hold what tools made or fetched (caches, builds, dependencies), not sources. */
const NOT_SOURCES = /^(?:\..*|node_modules|__pycache__|build|dist|.*\.egg-info)$/;

/** The files of one target under `root`, sorted (none if its directory is missing). */
function sources({ dir, names, recursive }, root = ROOT) {
  const out = [];
  if (!existsSync(join(root, dir))) return out;
  const walk = (at) => {
    for (const e of readdirSync(join(root, at), { withFileTypes: true })) {
      const path = join(at, e.name);
      if (e.isDirectory() && recursive && !NOT_SOURCES.test(e.name)) walk(path);
      else if (e.isFile() && names.test(e.name) && !e.name.endsWith('.d.ts')) out.push(path);
    }
  };
  walk(dir);
  return out.sort();
}

/** The functions of `file` that are measured, by its kind (none for Python). */
function measuredFunctions(file, text) {
  if (/\.[ch]$/.test(file)) return cFunctions(text);
  if (file.endsWith('.py')) return [];
  const fns = scriptFunctions(file, text);
  return /\.test\.[cm]?[jt]sx?$/.test(file) ? fns.filter((f) => !f.testCase) : fns;
}

/** What is too large in one file: `{ file, lines }` for the file, `{ file, fn, line, lines }` per function. */
export function measure(file, text) {
  const out = [];
  const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
  if (lines > MAX_FILE_LINES) out.push({ file, lines });
  for (const f of measuredFunctions(file, text)) {
    const n = f.last - f.first + 1;
    if (n > MAX_FUNCTION_LINES) out.push({ file, fn: f.name, line: f.first + 1, lines: n });
  }
  return out;
}

/**
 * Every finding of the tree at `root`, each with `allowed` (the reason) when its file is in
 * {@link ALLOWED}; an allowed file without findings gives `{ file, stale: true }`.
 */
export function scan(root = ROOT, allowed = ALLOWED) {
  const findings = [];
  const seen = new Set();
  for (const target of TARGETS)
    for (const file of sources(target, root)) {
      if (EXEMPT.has(file) || seen.has(file)) continue;
      seen.add(file);
      const found = measure(file, readFileSync(join(root, file), 'utf8'));
      const why = allowed.get(file);
      if (why !== undefined && found.length === 0) findings.push({ file, stale: true });
      findings.push(...found.map((f) => (why === undefined ? f : { ...f, allowed: why })));
    }
  return findings;
}

/** The findings that fail the check: all but those of allowed files. */
export function check(root = ROOT, allowed = ALLOWED) {
  return scan(root, allowed).filter((f) => f.allowed === undefined);
}

/** One line of the report. */
function report(f) {
  if (f.stale) return `${f.file}: passes now; remove it from ALLOWED in scripts/check-size.mjs`;
  const what =
    f.fn === undefined
      ? `${f.file}: ${f.lines} lines (at most ${MAX_FILE_LINES})`
      : `${f.file}:${f.line}: ${f.fn} is ${f.lines} lines (at most ${MAX_FUNCTION_LINES})`;
  return f.allowed === undefined ? what : `${what} [allowed: ${f.allowed}]`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const findings = scan();
  if (process.argv.includes('--json')) console.log(JSON.stringify(findings, null, 2));
  else for (const f of findings) console.log(report(f));
  const failing = findings.filter((f) => f.allowed === undefined).length;
  if (failing > 0) {
    console.error(`check-size: ${failing} unit(s) too large`);
    process.exitCode = 1;
  }
}
