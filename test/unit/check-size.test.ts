/** The size check (scripts/check-size.mjs): what it measures, and that src/ and web/src pass it. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
// @ts-expect-error: a plain ES module script, without type declarations.
import { ALLOWED, check, MAX_FILE_LINES, MAX_FUNCTION_LINES, measure } from '../../scripts/check-size.mjs';

type Finding = { file: string; fn?: string; line?: number; lines: number };
const measured = measure as (file: string, text: string) => Finding[];
const body = (n: number): string => Array.from({ length: n }, (_, i) => `  x += ${i};`).join('\n');

test('src/ and web/src: no file over 400 lines, no function over 80, but the allowed ones', () => {
  assert.deepEqual(check(), []);
  for (const [file, why] of ALLOWED as Map<string, string>) assert.match(why, /split after/, file);
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
});

test('files over the limit are reported with their length', () => {
  const text = `${Array.from({ length: MAX_FILE_LINES + 1 }, (_, i) => `export const v${i} = ${i};`).join('\n')}\n`;
  assert.deepEqual(measured('e.ts', text), [{ file: 'e.ts', lines: MAX_FILE_LINES + 1 }]);
});
