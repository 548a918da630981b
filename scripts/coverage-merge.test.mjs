// Run by scripts/coverage.sh under `--experimental-test-coverage`: copies the raw V8 coverage
// the suite's processes wrote (EXEC_SERVER_COVERAGE_DIR) into this runner's coverage directory
// (this process's NODE_V8_COVERAGE), under their own names (the runner reads `coverage-*.json`),
// so the runner's report merges them all.
import assert from 'node:assert/strict';
import { copyFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

test('the raw coverage of the suite is handed to the runner', () => {
  const from = process.env.EXEC_SERVER_COVERAGE_DIR;
  const to = process.env.NODE_V8_COVERAGE;
  assert.ok(from && to, 'EXEC_SERVER_COVERAGE_DIR and NODE_V8_COVERAGE must be set');
  const files = readdirSync(from).filter((f) => /^coverage-.*\.json$/.test(f));
  assert.ok(files.length > 0, `no coverage files in ${from}`);
  for (const f of files) copyFileSync(join(from, f), join(to, f));
});
