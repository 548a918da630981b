/**
 * The size check (scripts/check-size.mjs): what it measures in TypeScript, C and Python, the
 * test cases it leaves out, and that the tree passes it but for the allowed files.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
// @ts-expect-error: a plain ES module script, without type declarations.
import * as size from '../../scripts/check-size.mjs';

type Finding = { file: string; fn?: string; line?: number; lines: number; allowed?: string; stale?: boolean };
const MAX_FILE_LINES = size.MAX_FILE_LINES as number;
const MAX_FUNCTION_LINES = size.MAX_FUNCTION_LINES as number;
const ALLOWED = size.ALLOWED as Map<string, string>;
const EXEMPT = size.EXEMPT as Map<string, string>;
const measured = size.measure as (file: string, text: string) => Finding[];
const check = size.check as (root?: string, allowed?: Map<string, string>) => Finding[];
const scan = size.scan as (root?: string, allowed?: Map<string, string>) => Finding[];
const body = (n: number): string => Array.from({ length: n }, (_, i) => `  x += ${i};`).join('\n');
const inTree = (file: string): boolean => existsSync(new URL(`../../${file}`, import.meta.url));
const manyLines = (n: number, line = '#'): string => `${Array.from({ length: n }, () => line).join('\n')}\n`;

test('the tree: no file over 400 lines, no function over 80, but the allowed ones', () => {
  assert.deepEqual(check(), []);
  for (const [file, why] of ALLOWED) {
    assert.match(why, /split after/, file);
    assert.ok(inTree(file), `${file} is allowed but does not exist`);
  }
  for (const file of EXEMPT.keys()) assert.ok(inTree(file), `${file} is exempt but does not exist`);
});

test('functions are measured from their signature to their closing brace, whatever their form', () => {
  const fn = (n: number): string =>
    `export function f(a: number): number {\n  let x = a;\n${body(n - 4)}\n  return x;\n}\n`;
  assert.deepEqual(measured('a.ts', fn(MAX_FUNCTION_LINES)), []);
  assert.deepEqual(measured('a.ts', fn(MAX_FUNCTION_LINES + 1)), [
    { file: 'a.ts', fn: 'f', line: 1, lines: MAX_FUNCTION_LINES + 1 },
  ]);
  const arrow = `const g = async (y: string) => {\n  let x = 0;\n${body(90)}\n};\n`;
  assert.deepEqual(
    measured('b.ts', arrow).map((f) => [f.fn, f.line, f.lines]),
    [['g', 1, 93]],
  );
  const method = `class C {\n  m(): void {\n    const s = \`{ \${'}'} {\`;\n${body(85)}\n  }\n}\n`;
  assert.deepEqual(
    measured('c.ts', method).map((f) => [f.fn, f.line]),
    [['m', 2]],
  );
  const jsx = `export function V() {\n  return (\n    <div>\n${Array.from({ length: 90 }, () => "      <p>don't {'}'}</p>").join('\n')}\n    </div>\n  );\n}\n`;
  assert.deepEqual(
    measured('d.tsx', jsx).map((f) => [f.fn, f.line, f.lines]),
    [['V', 1, 96]],
  );
  const script = `export function s(a) {\n  let x = a;\n${body(85)}\n  return /}/.test(x);\n}\n`;
  assert.deepEqual(
    measured('scripts/s.mjs', script).map((f) => [f.fn, f.line, f.lines]),
    [['s', 1, 89]],
  );
});

test('files over the limit are reported with their length, whatever their language', () => {
  const text = `${Array.from({ length: MAX_FILE_LINES + 1 }, (_, i) => `export const v${i} = ${i};`).join('\n')}\n`;
  assert.deepEqual(measured('e.ts', text), [{ file: 'e.ts', lines: MAX_FILE_LINES + 1 }]);
  assert.deepEqual(measured('e.c', manyLines(MAX_FILE_LINES + 1, '/* */')), [
    { file: 'e.c', lines: MAX_FILE_LINES + 1 },
  ]);
  assert.deepEqual(measured('e.py', manyLines(MAX_FILE_LINES)), []);
  assert.deepEqual(measured('e.py', manyLines(MAX_FILE_LINES + 1)), [{ file: 'e.py', lines: MAX_FILE_LINES + 1 }]);
});

test('Python: the file length only, not its functions', () => {
  const py = `def f(x):\n${manyLines(120, '    x += 1')}    return x\n`;
  assert.deepEqual(measured('f.py', py), []);
});

test('in test files, the cases passed to describe/test/it are not measured; other functions are', () => {
  const cases = [
    "describe('suite', () => {",
    "  test('case', async (t) => {",
    `${body(90)}`,
    "    await t.test('subtest', { timeout: 5 }, async function () {",
    `${body(90)}`,
    '    });',
    '  });',
    "  it.skip('skipped', () => {",
    `${body(85)}`,
    '  });',
    '});',
  ].join('\n');
  assert.deepEqual(measured('t.test.ts', cases), []);
  // The same callbacks in a file that is not a test file are functions like any other.
  assert.deepEqual(
    measured('t.ts', cases).map((f) => [f.fn, f.line]),
    [
      ['(anonymous)', 1],
      ['(anonymous)', 2],
      ['(anonymous)', 93],
      ['(anonymous)', 186],
    ],
  );
  const helpers = [
    'function helper(x: number): number {',
    body(85),
    '  return x;',
    '}',
    "test('case', async () => {",
    '  await Promise.all([1, 2].map(async (x) => {',
    body(85),
    '  }));',
    '});',
  ].join('\n');
  assert.deepEqual(
    measured('h.test.ts', helpers).map((f) => [f.fn, f.line, f.lines]),
    [
      ['helper', 1, 88],
      ['(anonymous)', 90, 87],
    ],
  );
});

test('C: a top-level function runs from its signature to the next `}` in column 0', () => {
  const c = [
    '#include <stdio.h>',
    'typedef struct {',
    '  int a;',
    '} pair;',
    'static const int table[] = {',
    manyLines(MAX_FUNCTION_LINES + 1, '  1,').trimEnd(),
    '};',
    'struct big {',
    manyLines(5, '  int x;').trimEnd(),
    '};',
    'static int short_one(int a) {',
    '  return a;',
    '}',
    'static int long_one(int a,',
    '                    int b) {',
    '  int x = a + b;',
    body(MAX_FUNCTION_LINES - 3),
    '}',
    'int main(void)',
    '{',
    '  if (1) {',
    body(MAX_FUNCTION_LINES - 5),
    '  }',
    '  return 0;',
    '}',
    'static int exactly_max(void) {',
    '  int x = 0;',
    body(MAX_FUNCTION_LINES - 3),
    '}',
  ].join('\n');
  assert.deepEqual(measured('native/x.c', `${c}\n`), [
    { file: 'native/x.c', fn: 'long_one', line: 98, lines: MAX_FUNCTION_LINES + 1 },
    { file: 'native/x.c', fn: 'main', line: 179, lines: MAX_FUNCTION_LINES + 1 },
  ]);
});

test('the tree walk: what is looked at, what is skipped, allowed and stale entries', () => {
  const root = mkdtempSync(join(tmpdir(), 'check-size-'));
  const put = (file: string, text: string): void => {
    mkdirSync(dirname(join(root, file)), { recursive: true });
    writeFileSync(join(root, file), text);
  };
  const long = manyLines(MAX_FILE_LINES + 1, '//');
  try {
    for (const file of ['src/a.ts', 'bench/b.ts', 'scripts/lib/c.mjs', 'test/support/d.ts', 'web/src/e.tsx'])
      put(file, long);
    put('native/f.c', long);
    put('native/g.h', long);
    put('clients/python/pkg/h.py', manyLines(MAX_FILE_LINES + 1));
    put('bench/i.py', manyLines(MAX_FILE_LINES + 1));
    // Not sources: build output, dependencies, caches, generated code, other directories.
    put('clients/python/build/lib/pkg/h.py', manyLines(MAX_FILE_LINES + 1));
    put('src/node_modules/x/y.ts', long);
    put('test/.cache/z.ts', long);
    put('clients/python/exec_server/_generated.py', manyLines(MAX_FILE_LINES + 1));
    put('docs/j.ts', long);
    put('native/sub/k.c', long);
    put('native/ok.c', 'int main(void) {\n  return 0;\n}\n');
    const allowed = new Map([
      ['native/f.c', 'split after x'],
      ['native/ok.c', 'split after y'],
    ]);
    const files = (fs: Finding[]): string[] => fs.map((f) => f.file).sort();
    assert.deepEqual(files(check(root, allowed)), [
      'bench/b.ts',
      'bench/i.py',
      'clients/python/pkg/h.py',
      'native/g.h',
      'native/ok.c',
      'scripts/lib/c.mjs',
      'src/a.ts',
      'test/support/d.ts',
      'web/src/e.tsx',
    ]);
    const all = scan(root, allowed);
    assert.deepEqual(
      all.find((f) => f.file === 'native/f.c'),
      { file: 'native/f.c', lines: MAX_FILE_LINES + 1, allowed: 'split after x' },
    );
    assert.deepEqual(
      all.find((f) => f.file === 'native/ok.c'),
      { file: 'native/ok.c', stale: true },
    );
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
