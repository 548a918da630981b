/** The 8-byte frame demuxer, without an engine: arbitrary splits, labels, backpressure, end. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PassThrough, Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { callbackWritable, FrameDemuxer } from '../../src/backends/docker/engine/frame-demuxer.ts';

function frame(type: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h[0] = type;
  h.writeUInt32BE(payload.length, 4);
  return Buffer.concat([h, payload]);
}

test('frames split at every possible boundary are labelled and reassembled', async () => {
  const wire = Buffer.concat([
    frame(1, Buffer.from('hello ')),
    frame(2, Buffer.from('oops')),
    frame(1, Buffer.alloc(0)),
    frame(1, Buffer.from('world')),
  ]);
  for (let cut = 1; cut < wire.length; cut++) {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const d = new FrameDemuxer(
      callbackWritable((b) => out.push(b)),
      callbackWritable((b) => err.push(b)),
    );
    await pipeline(Readable.from([wire.subarray(0, cut), wire.subarray(cut)]), d);
    assert.equal(Buffer.concat(out).toString(), 'hello world', `cut ${cut}`);
    assert.equal(Buffer.concat(err).toString(), 'oops');
    assert.deepEqual(d.stats, { stdoutBytes: 11, stderrBytes: 4 });
  }
});

test('a slow target pauses the source (backpressure) and both targets end', async () => {
  const payload = Buffer.alloc(64 * 1024, 7);
  const frames = Array.from({ length: 64 }, () => frame(1, payload)); // 4 MiB
  let produced = 0;
  const source = new Readable({
    read() {
      const f = frames.shift();
      if (f === undefined) this.push(null);
      else {
        produced += 1;
        this.push(f);
      }
    },
  });
  const stdout = new PassThrough({ highWaterMark: 16 * 1024 });
  const stderr = new PassThrough();
  stderr.resume();
  let ended = 0;
  stdout.on('end', () => ended++);
  stderr.on('end', () => ended++);
  const d = new FrameDemuxer(stdout, stderr);
  const done = pipeline(source, d);
  await new Promise((r) => setTimeout(r, 50));
  // Nobody reads stdout: only a few frames may have been pulled from the source.
  assert.ok(produced < 8, `source produced ${produced} frames without a reader`);
  let received = 0;
  const sink = new Writable({
    write(chunk: Buffer, _e, cb) {
      received += chunk.length;
      setTimeout(cb, 0);
    },
  });
  await Promise.all([done, pipeline(stdout, sink)]);
  assert.equal(received, 64 * 64 * 1024);
  assert.equal(ended, 2);
});

test('unknown frame type is an error; a truncated frame still ends the targets', async () => {
  const bad = new FrameDemuxer(
    callbackWritable(() => {}),
    callbackWritable(() => {}),
  );
  await assert.rejects(pipeline(Readable.from([frame(7, Buffer.from('x'))]), bad));
  const out = new PassThrough();
  out.resume();
  const ended = new Promise((r) => out.on('end', r));
  const t = new FrameDemuxer(
    out,
    callbackWritable(() => {}),
  );
  await assert.rejects(pipeline(Readable.from([frame(1, Buffer.from('abcdef')).subarray(0, 10)]), t), /inside a frame/);
  await ended;
});

test('frames of one chunk that find their target full share one drain wait', async () => {
  const frames = Array.from({ length: 40 }, (_, i) => frame(i % 4 === 0 ? 2 : 1, Buffer.alloc(16, i)));
  const stdout = new PassThrough({ highWaterMark: 1 });
  const stderr = new PassThrough({ highWaterMark: 1 });
  const d = new FrameDemuxer(stdout, stderr);
  let written = false;
  d.write(Buffer.concat(frames), () => {
    written = true;
  });
  // 30 payloads went to stdout and 10 to stderr, every one of them past its high-water mark.
  assert.equal(stdout.listenerCount('drain'), 1, 'one wait on stdout');
  assert.equal(stderr.listenerCount('drain'), 1, 'one wait on stderr');
  assert.equal(written, false, 'the chunk is not taken while its targets are full');
  const bytes = [0, 0];
  const drained = (s: PassThrough, i: 0 | 1): Promise<void> =>
    new Promise((resolve) => {
      s.on('data', (b: Buffer) => {
        bytes[i] = (bytes[i] ?? 0) + b.length;
      });
      s.once('drain', () => resolve());
    });
  await Promise.all([drained(stdout, 0), drained(stderr, 1)]);
  await new Promise((r) => setImmediate(r));
  assert.equal(written, true, 'taken once both targets drained');
  assert.deepEqual(bytes, [30 * 16, 10 * 16]);
});
