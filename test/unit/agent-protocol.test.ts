/** The docker agent's frame codec (src/backends/docker/agent/agent-protocol.ts), byte by byte, without an engine. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  AGENT_HEADER_BYTES,
  AGENT_MAX_PAYLOAD,
  AGENT_PROTOCOL_VERSION,
  type AgentFrame,
  AgentStreamParser,
  encodeAck,
  encodeHello,
  encodeResize,
  encodeSignal,
  encodeSpawn,
  FromAgent,
  frame,
  parseExit,
  parseProcRecord,
  ToAgent,
} from '../../src/backends/docker/agent/agent-protocol.ts';

/** Docker's 8-byte stdout/stderr frame around `payload`. */
function dockerFrame(stream: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h[0] = stream;
  h.writeUInt32BE(payload.length, 4);
  return Buffer.concat([h, payload]);
}

/** A parser that records what it hands on (payloads copied: they may be views of a reused buffer). */
function recorder(framing: 'docker' | 'raw' = 'docker') {
  const frames: Array<Omit<AgentFrame, 'payload'> & { payload: string }> = [];
  const stderr: string[] = [];
  const errors: string[] = [];
  const parser = new AgentStreamParser(
    (f) => frames.push({ type: f.type, stream: f.stream, handle: f.handle, payload: f.payload.toString('latin1') }),
    (t) => stderr.push(t.toString()),
    (e) => errors.push(e.message),
    framing,
  );
  return { parser, frames, stderr, errors };
}

test('frame: little-endian length, type, zero stream and padding, handle, then the payload', () => {
  const f = frame(ToAgent.STDIN, 0x01020304, Buffer.from('hi'));
  assert.equal(f.length, AGENT_HEADER_BYTES + 2);
  assert.deepEqual([...f.subarray(0, 12)], [2, 0, 0, 0, 3, 0, 0, 0, 4, 3, 2, 1]);
  assert.equal(f.subarray(12).toString(), 'hi');
  assert.equal(frame(ToAgent.LIST, 7).length, AGENT_HEADER_BYTES);
  assert.equal(frame(ToAgent.LIST, 7).readUInt32LE(0), 0);
});

test('HELLO carries version, retention and window; RESIZE clamps to u16; SIGNAL carries the number', () => {
  const hello = encodeHello(1 << 20, 4096);
  assert.equal(hello.readUInt8(4), ToAgent.HELLO);
  assert.equal(hello.readUInt32LE(8), 0, 'handle 0: the connection');
  assert.deepEqual(
    [hello.readUInt32LE(12), hello.readUInt32LE(16), hello.readUInt32LE(20)],
    [AGENT_PROTOCOL_VERSION, 1 << 20, 4096],
  );
  const resize = encodeResize(5, { rows: 100_000, cols: 80 });
  assert.equal(resize.readUInt8(4), ToAgent.RESIZE);
  assert.deepEqual([resize.readUInt16LE(12), resize.readUInt16LE(14)], [0xffff, 80]);
  const sig = encodeSignal(9, 15);
  assert.deepEqual([sig.readUInt8(4), sig.readUInt32LE(8), sig.readUInt32LE(12)], [ToAgent.SIGNAL, 9, 15]);
});

test('SPAWN: NUL-ended fields in order, counts before argv and env, an empty arg0 when unset', () => {
  const f = encodeSpawn(3, {
    mode: 'pty',
    size: { rows: 24, cols: 80 },
    uid: 1000,
    gid: 1001,
    cwd: '/work',
    argv: ['bash', '-c', 'echo é'],
    env: { A: '1', PATH: '/bin' },
    tag: 'tag-x',
  });
  assert.equal(f.readUInt8(4), ToAgent.SPAWN);
  assert.equal(f.readUInt32LE(8), 3);
  const payload = f.subarray(12);
  assert.equal(f.readUInt32LE(0), payload.length);
  assert.equal(payload.at(-1), 0, 'the last field is NUL-ended too');
  assert.deepEqual(payload.toString('utf8').split('\0'), [
    'pty',
    '24',
    '80',
    '1000',
    '1001',
    '/work',
    '',
    '3',
    'bash',
    '-c',
    'echo é',
    '2',
    'A=1',
    'PATH=/bin',
    'tag-x',
    '',
  ]);
  const withArg0 = encodeSpawn(1, {
    mode: 'pipe',
    size: { rows: 1, cols: 1 },
    uid: 0,
    gid: 0,
    cwd: '/',
    arg0: '-sh',
    argv: [],
    env: {},
    tag: '',
  });
  assert.deepEqual(withArg0.subarray(12).toString().split('\0').slice(6, 9), ['-sh', '0', '0']);
});

test('ACK: 16 bytes per mark, u64 seq then u64 end offset; none is an empty payload', () => {
  const f = encodeAck(4, [
    [0, 100],
    [7, 2 ** 40],
  ]);
  assert.equal(f.readUInt32LE(0), 32);
  assert.deepEqual(
    [f.readBigUInt64LE(12), f.readBigUInt64LE(20), f.readBigUInt64LE(28), f.readBigUInt64LE(36)],
    [0n, 100n, 7n, 2n ** 40n],
  );
  assert.equal(encodeAck(4, []).length, AGENT_HEADER_BYTES);
});

test('PROC records: fields, marks (malformed ones skipped) and the mode fallback', () => {
  const rec = parseProcRecord(Buffer.from('t1\0pty\x0042\x0010\x00500\x003\x001,100\x00x,y\x002,300\0'));
  assert.deepEqual(rec, {
    tag: 't1',
    mode: 'pty',
    pid: 42,
    firstOffset: 10,
    totalOffset: 500,
    marks: [
      [1, 100],
      [2, 300],
    ],
  });
  assert.equal(parseProcRecord(Buffer.from('t\0pipe\x001\x000\x000\x000\0')).mode, 'pipe');
  assert.equal(parseProcRecord(Buffer.from('t\0weird\x001\x000\x000\x000\0')).mode, 'pipe-no-stdin');
  assert.deepEqual(parseProcRecord(Buffer.alloc(0)).marks, []);
});

test('EXIT: exited with a code, signaled with a number', () => {
  assert.deepEqual(parseExit(Buffer.from('exited\x003')), { kind: 'exited', code: 3 });
  assert.deepEqual(parseExit(Buffer.from('signaled\x009')), { kind: 'signaled', signo: 9 });
});

test('parser: docker-framed agent frames split at every boundary come out whole, stderr apart', () => {
  const agentBytes = Buffer.concat([
    frame(FromAgent.HELLO, 0, Buffer.from('version=1\n')),
    frame(FromAgent.OUTPUT, 2, Buffer.from('\0\0\0\0\0\0\0\0abc')),
    frame(FromAgent.LIST_END, 0),
  ]);
  agentBytes.writeUInt8(1, 12 + 10 + 5); // the OUTPUT frame's stream byte: stdout
  const wire = Buffer.concat([
    dockerFrame(1, agentBytes.subarray(0, 15)),
    dockerFrame(2, Buffer.from('warn')),
    dockerFrame(1, agentBytes.subarray(15)),
  ]);
  for (let cut = 0; cut <= wire.length; cut++) {
    const r = recorder();
    r.parser.push(wire.subarray(0, cut));
    r.parser.push(wire.subarray(cut));
    assert.deepEqual(r.errors, [], `cut ${cut}`);
    assert.equal(r.stderr.join(''), 'warn', `cut ${cut}`);
    assert.deepEqual(
      r.frames.map((f) => [f.type, f.stream, f.handle, f.payload.length]),
      [
        [FromAgent.HELLO, undefined, 0, 10],
        [FromAgent.OUTPUT, 'stdout', 2, 11],
        [FromAgent.LIST_END, undefined, 0, 0],
      ],
      `cut ${cut}`,
    );
  }
});

test('parser: a raw stream is agent frames only, byte by byte', () => {
  const r = recorder('raw');
  const wire = Buffer.concat([
    frame(FromAgent.SPAWNED, 5, Buffer.from('123')),
    frame(FromAgent.ERROR, 0, Buffer.from('x')),
  ]);
  for (const b of wire) r.parser.push(Buffer.from([b]));
  assert.deepEqual(
    r.frames.map((f) => [f.type, f.handle, f.payload]),
    [
      [FromAgent.SPAWNED, 5, '123'],
      [FromAgent.ERROR, 0, 'x'],
    ],
  );
});

test('parser: an oversized length or an unknown docker stream fails once, then nothing is parsed', () => {
  const big = Buffer.alloc(12);
  big.writeUInt32LE(AGENT_MAX_PAYLOAD + 1, 0);
  const r = recorder('raw');
  r.parser.push(big);
  r.parser.push(frame(FromAgent.HELLO, 0));
  assert.equal(r.errors.length, 1);
  assert.match(r.errors[0] ?? '', /exceeds the limit/);
  assert.equal(r.frames.length, 0);

  const split = recorder('raw');
  split.parser.push(big.subarray(0, 5));
  split.parser.push(big.subarray(5));
  assert.match(split.errors[0] ?? '', /exceeds the limit/);

  const d = recorder();
  d.parser.push(dockerFrame(3, Buffer.from('??')));
  d.parser.push(dockerFrame(1, frame(FromAgent.HELLO, 0)));
  assert.deepEqual(d.errors, ['docker stream: unexpected frame type 3']);
  assert.equal(d.frames.length, 0);
});
