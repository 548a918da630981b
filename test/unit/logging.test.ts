/** The server's logger (src/logging.ts): the format choice, and tokens redacted from what is written. */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { createLogger, resolveLogFormat } from '../../src/logging.ts';

test('auto is pretty on a terminal, json elsewhere; an explicit format is kept', () => {
  assert.equal(resolveLogFormat('auto', { isTTY: true }), 'pretty');
  assert.equal(resolveLogFormat('auto', { isTTY: false }), 'json');
  assert.equal(resolveLogFormat('auto', {}), 'json');
  assert.equal(resolveLogFormat('json', { isTTY: true }), 'json');
  assert.equal(resolveLogFormat('pretty', {}), 'pretty');
});

function collector() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      cb();
    },
  });
  return { lines, stream };
}

test('json lines, at the level asked, with bearer tokens and token fields redacted', () => {
  const { lines, stream } = collector();
  const log = createLogger('info', 'json', stream);
  log.debug('hidden');
  log.info({ req: { headers: { authorization: 'Bearer s3cret' } }, config: { token: 't0k' } }, 'hello');
  assert.equal(lines.length, 1);
  const entry = JSON.parse(lines[0] ?? '{}');
  assert.equal(entry.msg, 'hello');
  assert.equal(entry.req.headers.authorization, '[redacted]');
  assert.equal(entry.config.token, '[redacted]');
  assert.ok(!lines[0]?.includes('s3cret'));
});

test('pretty: one readable line per entry, redacted too', () => {
  const { lines, stream } = collector();
  const log = createLogger('info', 'pretty', stream);
  log.info({ config: { tokens: 'a:b' }, session: 's1' }, 'ready');
  assert.equal(lines.length, 1);
  assert.match(lines[0] ?? '', /INFO.*ready/);
  assert.match(lines[0] ?? '', /\[redacted\]/);
  assert.ok(!lines[0]?.includes('a:b'));
});
