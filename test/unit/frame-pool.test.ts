/** Reusable output frames (src/rpc/frame-pool.ts): exact sizes, reuse after release, a bounded free list. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FramePool } from '../../src/rpc/frame-pool.ts';

test('a frame is exactly the size asked, and a released one is reused', () => {
  const pool = new FramePool(1024, 2);
  const a = pool.take(100);
  assert.equal(a.frame.length, 100);
  assert.ok(a.release);
  a.frame.fill(7);
  a.release();
  const b = pool.take(300);
  assert.equal(b.frame.length, 300);
  assert.equal(b.frame.buffer, a.frame.buffer, 'the same memory');
  assert.equal(b.frame[0], 7);
});

test('a frame bigger than the pool size is a plain allocation with nothing to release', () => {
  const pool = new FramePool(64, 2);
  const big = pool.take(65);
  assert.equal(big.frame.length, 65);
  assert.equal(big.release, undefined);
  assert.ok(pool.take(64).release);
});

test('at most `max` frames are kept: the one released past it is dropped', () => {
  const pool = new FramePool(16, 1);
  const a = pool.take(16);
  const b = pool.take(16);
  assert.notEqual(a.frame.buffer, b.frame.buffer);
  a.release?.();
  b.release?.();
  const c = pool.take(16);
  const d = pool.take(16);
  assert.equal(c.frame.buffer, a.frame.buffer);
  assert.notEqual(d.frame.buffer, b.frame.buffer, 'b was not kept');
});
