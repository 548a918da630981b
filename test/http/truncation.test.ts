import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildResult } from '../../src/tools/format.ts';
import { HeadTailBuffer } from '../../src/tools/head-tail-buffer.ts';
import {
  approxTokenCount,
  countLines,
  formattedTruncateText,
  truncateMiddleTokens,
} from '../../src/tools/truncation.ts';
import { execYieldMs, processLimitWarning, writeStdinYieldMs } from '../../src/tools/unified-exec.ts';
import { TEXT_RE } from './helpers.ts';

test('token approximation is ceil(bytes / 4), as Codex counts', () => {
  assert.equal(approxTokenCount(''), 0);
  assert.equal(approxTokenCount('hello\n'), 2);
  assert.equal(approxTokenCount("pyenv: cannot rehash: /root/.pyenv/shims isn't writable\nhello\n"), 16);
  assert.equal(approxTokenCount('é'), 1);
  assert.equal(countLines('a\nb\n'), 2);
  assert.equal(countLines('a\nb'), 2);
  assert.equal(countLines(''), 0);
});

test('middle truncation keeps head and tail within the token budget', () => {
  const text = 'a'.repeat(1000) + 'b'.repeat(1000);
  assert.equal(truncateMiddleTokens(text, 1000), text);
  const cut = truncateMiddleTokens(text, 100);
  assert.equal(cut, `${'a'.repeat(200)}…400 tokens truncated…${'b'.repeat(200)}`);
  const formatted = formattedTruncateText(text, 100);
  assert.equal(formatted, `Warning: truncated output (original token count: 500)\nTotal output lines: 1\n\n${cut}`);
  assert.equal(formattedTruncateText('short', 100), 'short');
  assert.equal(truncateMiddleTokens('abc', 0), '…1 tokens truncated…');
});

test('middle truncation never splits a UTF-8 character', () => {
  const text = 'é'.repeat(100); // 200 bytes
  const cut = truncateMiddleTokens(text, 5); // 20 bytes budget: 10 head, 10 tail
  assert.ok(!cut.includes('\uFFFD'));
  assert.ok(cut.startsWith(`${'é'.repeat(5)}…`));
  assert.ok(cut.endsWith(`…${'é'.repeat(5)}`) || cut.endsWith('é'.repeat(5)));
});

test('head/tail buffer keeps the first and the newest bytes and counts the middle', () => {
  const buf = new HeadTailBuffer(10);
  buf.push(Buffer.from('0123456789abcdef'));
  buf.push(Buffer.from('XYZ'));
  assert.equal(buf.omittedBytes, 9);
  assert.equal(buf.drain().toString(), '01234\n... 9 bytes omitted ...\nefXYZ');
  assert.equal(buf.size, 0);
  buf.push(Buffer.from('abc'));
  assert.equal(buf.drain().toString(), 'abc');
});

test('yield clamps and defaults follow Codex', () => {
  assert.equal(execYieldMs(undefined), 10_000);
  assert.equal(execYieldMs(null), 10_000);
  assert.equal(execYieldMs(0), 250);
  assert.equal(execYieldMs(100_000), 30_000);
  assert.equal(writeStdinYieldMs(undefined, false), 250);
  assert.equal(writeStdinYieldMs(10, false), 250);
  assert.equal(writeStdinYieldMs(100_000, false), 30_000);
  assert.equal(writeStdinYieldMs(undefined, true), 5_000);
  assert.equal(writeStdinYieldMs(60_000, true), 60_000);
  assert.equal(writeStdinYieldMs(1_000_000, true), 300_000);
  assert.match(
    processLimitWarning(61),
    /^The maximum number of unified exec processes you can keep open is 60 and you currently have 61 processes open\. Reuse older processes/,
  );
});

test('the response text is the block Codex shows its model', () => {
  const r = buildResult({ wallTimeMs: 251.5, sessionId: 26668, rawOutput: 'pyenv\n' });
  assert.match(r.text, TEXT_RE);
  assert.equal(
    r.text,
    `Chunk ID: ${r.chunk_id}\nWall time: 0.2515 seconds\nProcess running with session ID 26668\nOriginal token count: 2\nOutput:\npyenv\n`,
  );
  const e = buildResult({ wallTimeMs: 0, exitCode: 0, rawOutput: 'done\n' });
  assert.equal(
    e.text,
    `Chunk ID: ${e.chunk_id}\nWall time: 0.0000 seconds\nProcess exited with code 0\nOriginal token count: 2\nOutput:\ndone\n`,
  );
  assert.equal(e.session_id, undefined);
});
