/**
 * One error path: every code of the registry answers with one HTTP status on every route. The
 * routes are read as text: an answer that sets a status by hand must set the registry's status of
 * the code it sends, and an error of unknown code (`toExecError`) must be sent with its own status.
 * A plain `new Error(...)` in src/ is for programmer errors only and says so (or is errno-shaped
 * for `fromErrno`, or is answered over the wire by the SDK).
 */
import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ERROR_REGISTRY, type ErrorCode, execError, toExecError } from '../../src/errors.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

async function sources(): Promise<{ file: string; text: string }[]> {
  const entries = await readdir(join(ROOT, 'src'), { recursive: true, withFileTypes: true });
  const files = entries.filter((e) => e.isFile() && e.name.endsWith('.ts')).map((e) => join(e.parentPath, e.name));
  return Promise.all(files.map(async (f) => ({ file: relative(ROOT, f), text: await readFile(f, 'utf8') })));
}

test('each registry code maps to exactly one status, and an error built from it carries that status', () => {
  const statusOf = new Map<string, Set<number>>();
  for (const [code, [status]] of Object.entries(ERROR_REGISTRY)) {
    statusOf.set(code, (statusOf.get(code) ?? new Set()).add(status));
    assert.equal(execError(code as ErrorCode, 'm').statusCode, status, code);
    assert.ok(status >= 400 && status <= 599, `${code}: ${status} is an error status`);
  }
  for (const [code, statuses] of statusOf) assert.equal(statuses.size, 1, code);
  // Anything not of the registry is one code (EXEC_ERR_INTERNAL) and so one status.
  assert.equal(toExecError(new Error('x')).statusCode, ERROR_REGISTRY.EXEC_ERR_INTERNAL[0]);
});

test('routes: a status set by hand is the registry status of the code sent with it', async () => {
  let checked = 0;
  for (const { file, text } of await sources()) {
    for (const m of text.matchAll(
      /\.(?:code|writeHead)\((\d{3})\)[^;]{0,300}?httpErrorBody\(\s*execError\(\s*'(\w+)'/g,
    )) {
      const [, status, code] = m;
      assert.ok(code !== undefined && code in ERROR_REGISTRY, `${file}: unknown code ${code}`);
      assert.equal(Number(status), ERROR_REGISTRY[code as ErrorCode][0], `${file}: ${code} answered ${status}`);
      checked++;
    }
    const bad = /\.(?:code|writeHead)\(\d{3}\)[^;]{0,200}httpErrorBody\(\s*toExecError/.exec(text);
    assert.equal(bad, null, `${file}: an error of any code answered with a fixed status: ${bad?.[0]}`);
  }
  assert.ok(checked > 0, 'the scan found the routes that set a status by hand');
});

test('a plain Error in src/ is a programmer error, errno-shaped or answered over the wire, and says so', async () => {
  for (const { file, text } of await sources()) {
    const lines = text.split('\n');
    lines.forEach((line, i) => {
      if (!/new Error\(/.test(line)) return;
      const before = lines.slice(Math.max(0, i - 3), i + 1).join('\n');
      assert.match(
        before,
        /\/\/|\*/,
        `${file}:${i + 1}: plain Error without a comment saying why it is not a registry error: ${line.trim()}`,
      );
    });
  }
});
