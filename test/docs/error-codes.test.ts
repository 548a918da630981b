/**
 * The error registry (src/errors.ts), its table in docs/errors.md and the codes the other docs
 * name stay in step; every code has a place in src/ that answers with it.
 */
import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ERROR_REGISTRY, type ErrorCode, RETRYABLE_CODES } from '../../src/errors.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CODES = Object.keys(ERROR_REGISTRY) as ErrorCode[];

async function filesUnder(dir: string, ext: RegExp): Promise<string[]> {
  const entries = await readdir(join(ROOT, dir), { recursive: true, withFileTypes: true });
  return entries.filter((e) => e.isFile() && ext.test(e.name)).map((e) => join(e.parentPath, e.name));
}

test('docs/errors.md lists every code once, with its HTTP status, JSON-RPC code and retryability', async () => {
  const text = await readFile(join(ROOT, 'docs/errors.md'), 'utf8');
  const rows = [...text.matchAll(/^\| `(EXEC_ERR_[A-Z_]+)` \| (\d+) \| (-?\d+) \| (yes|no) \|/gm)];
  assert.deepEqual(
    rows.map((r) => r[1]),
    CODES,
    'one row per registry code, in registry order',
  );
  for (const [, code, status, rpc, retryable] of rows) {
    const [s, r] = ERROR_REGISTRY[code as ErrorCode];
    assert.equal(Number(status), s, `${code}: HTTP status`);
    assert.equal(Number(rpc), r, `${code}: JSON-RPC code`);
    assert.equal(retryable === 'yes', RETRYABLE_CODES.has(code as ErrorCode), `${code}: retryable`);
  }
});

test('every code a doc names exists in the registry', async () => {
  const docs = [join(ROOT, 'README.md'), ...(await filesUnder('docs', /\.md$/))];
  for (const file of docs) {
    const named = new Set((await readFile(file, 'utf8')).match(/EXEC_ERR_[A-Z_]*[A-Z]/g) ?? []);
    for (const code of named) assert.ok(code in ERROR_REGISTRY, `${file} names ${code}, which the registry lacks`);
  }
});

test('every registry code is answered somewhere in src/', async () => {
  const sources = await filesUnder('src', /\.tsx?$/);
  const text = (
    await Promise.all(sources.filter((f) => !f.endsWith('/src/errors.ts')).map((f) => readFile(f, 'utf8')))
  ).join('\n');
  const registry = await readFile(join(ROOT, 'src/errors.ts'), 'utf8');
  // errors.ts itself answers with a few: the framework's own 4xx and the fallback for bugs.
  const own = registry.slice(registry.indexOf('export function codeOfHttpStatus'));
  for (const code of CODES) {
    assert.ok(
      text.includes(`'${code}'`) || own.includes(`'${code}'`),
      `${code} is defined but nothing answers with it`,
    );
  }
});
