/**
 * Equality of large texts with a short failure message. node:assert prints (and diffs) both
 * values in full; with megabytes of output the test runner's parent process then spins for
 * hours on the report (seen: a failing 4 MB comparison hung a whole CI run).
 */
import { AssertionError } from 'node:assert';

const EXCERPT = 40;

export function assertSameText(actual: string, expected: string, what = 'text'): void {
  if (actual === expected) return;
  let at = 0;
  while (at < actual.length && at < expected.length && actual[at] === expected[at]) at++;
  const around = (s: string): string => JSON.stringify(s.slice(Math.max(0, at - EXCERPT / 2), at + EXCERPT / 2));
  throw new AssertionError({
    message: `${what} differs: ${actual.length} chars, expected ${expected.length}; first difference at ${at}: ${around(actual)} vs ${around(expected)}`,
    actual: actual.length,
    expected: expected.length,
    operator: 'assertSameText',
  });
}
