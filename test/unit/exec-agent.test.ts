/**
 * The exec agent's protocol on its own, run on this host (no engine): the real binary behind a
 * pipe, framed as an engine would frame it, parsed by the server's parser. Bad input from either
 * side is a clear error, never a crash; the daemon outlives a broken connection.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import {
  AgentStreamParser,
  encodeHello,
  encodeSpawn,
  frame,
  FromAgent,
  parseExit,
  ToAgent,
  type AgentFrame,
} from '../../src/backends/docker/agent/agent-protocol.ts';
import { AGENT_BINARY } from '../../src/backends/docker/agent/agent-install.ts';

// Under CI the binary must exist (.ci/run installs the compiler): a missing one fails there.
const built = existsSync(AGENT_BINARY) || process.env['CI'] === 'true';
const opts = { skip: built ? undefined : 'build/exec-agent not built (needs gcc and libc6-dev)', timeout: 30_000 };
const daemons = new Set<number>();
after(() => {
  for (const pid of daemons) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
});

/** Wraps raw bytes as Docker's stdout frame, as the engine delivers an exec's output. */
function dockerFrame(data: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h[0] = 1;
  h.writeUInt32BE(data.length, 4);
  return Buffer.concat([h, data]);
}

class Attached {
  readonly child: ChildProcess;
  readonly frames: AgentFrame[] = [];
  ended = false;
  #waiters: Array<() => void> = [];

  constructor(socket: string) {
    this.child = spawn(AGENT_BINARY, ['attach', socket], { stdio: ['pipe', 'pipe', 'inherit'] });
    const parser = new AgentStreamParser(
      (f) => {
        this.frames.push({ ...f, payload: Buffer.from(f.payload) });
        for (const w of this.#waiters.splice(0)) w();
      },
      () => undefined,
      (err) => assert.fail(err),
    );
    this.child.stdout!.on('data', (d: Buffer) => parser.push(dockerFrame(d)));
    this.child.stdout!.on('end', () => {
      this.ended = true;
      for (const w of this.#waiters.splice(0)) w();
    });
  }

  send(b: Buffer): void {
    this.child.stdin!.write(b);
  }

  async next(pred: (f: AgentFrame) => boolean, what: string): Promise<AgentFrame> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const i = this.frames.findIndex(pred);
      if (i >= 0) return this.frames.splice(i, 1)[0]!;
      if (this.ended || Date.now() > deadline) throw new Error(`no ${what} (ended: ${this.ended})`);
      await new Promise<void>((r) => {
        this.#waiters.push(r);
        setTimeout(r, 200);
      });
    }
  }

  async hello(): Promise<number> {
    this.send(encodeHello(1024 * 1024, 2 * 1024 * 1024));
    const h = await this.next((f) => f.type === FromAgent.HELLO, 'hello');
    const pid = Number(/pid=(\d+)/.exec(h.payload.toString())?.[1]);
    daemons.add(pid);
    return pid;
  }
}

const spawnFrame = (handle: number, argv: string[], mode: 'pipe' | 'pipe-no-stdin' = 'pipe-no-stdin'): Buffer =>
  encodeSpawn(handle, {
    mode,
    size: { cols: 80, rows: 24 },
    uid: 0,
    gid: 0,
    cwd: '/',
    argv,
    env: { PATH: '/usr/bin:/bin' },
    tag: 'none\n',
  });

test('spawn, stdin, output with offsets, exit after the last output', opts, async () => {
  const a = new Attached(join(await mkdtemp(join(tmpdir(), 'agent-')), 'a.sock'));
  await a.hello();
  a.send(spawnFrame(1, ['sh', '-c', 'cat; echo done >&2; exit 3'], 'pipe'));
  assert.equal((await a.next((f) => f.type === FromAgent.SPAWNED, 'spawned')).handle, 1);
  a.send(frame(ToAgent.STDIN, 1, Buffer.from('hello\n')));
  a.send(frame(ToAgent.CLOSE_STDIN, 1));
  const out = await a.next((f) => f.type === FromAgent.OUTPUT && f.stream === 'stdout', 'stdout');
  assert.equal(out.payload.readBigUInt64LE(0), 0n);
  assert.equal(out.payload.subarray(8).toString(), 'hello\n');
  const err = await a.next((f) => f.type === FromAgent.OUTPUT && f.stream === 'stderr', 'stderr');
  assert.equal(err.payload.readBigUInt64LE(0), 6n, 'offsets count over both streams');
  assert.deepEqual(parseExit((await a.next((f) => f.type === FromAgent.EXIT, 'exit')).payload), {
    kind: 'exited',
    code: 3,
  });
  a.child.kill();
});

test(
  'bad frames are answered with clear errors; a frame past the limit drops the connection, not the daemon',
  opts,
  async () => {
    const socket = join(await mkdtemp(join(tmpdir(), 'agent-')), 'a.sock');
    const a = new Attached(socket);
    const pid = await a.hello();
    a.send(frame(99, 0));
    assert.match(
      (await a.next((f) => f.type === FromAgent.ERROR, 'error')).payload.toString(),
      /unknown frame type 99/,
    );
    a.send(frame(ToAgent.SPAWN, 5, Buffer.from('pipe\0no-terminator')));
    assert.match(
      (await a.next((f) => f.type === FromAgent.FAILED, 'failed')).payload.toString(),
      /malformed spawn frame/,
    );
    a.send(frame(ToAgent.SPAWN, 6, Buffer.from('teleport\x0024\x0080\x000\x000\x00/\x00\x001\x00true\x000\x00\x00')));
    assert.match(
      (await a.next((f) => f.type === FromAgent.FAILED, 'failed')).payload.toString(),
      /unknown mode teleport/,
    );
    a.send(frame(ToAgent.SIGNAL, 77, Buffer.from([15, 0, 0, 0])));
    assert.match(
      (await a.next((f) => f.type === FromAgent.ERROR, 'error')).payload.toString(),
      /unknown process handle 77/,
    );
    const bomb = Buffer.alloc(12);
    bomb.writeUInt32LE(64 * 1024 * 1024, 0);
    bomb[4] = ToAgent.STDIN;
    a.send(bomb);
    assert.match((await a.next((f) => f.type === FromAgent.ERROR, 'error')).payload.toString(), /exceeds the limit/);
    await new Promise((r) => a.child.once('exit', r));
    // The daemon lives on: a new connection is served by the same one.
    const b = new Attached(socket);
    assert.equal(await b.hello(), pid);
    b.send(encodeHello(1024, 65536).fill(9, 12, 13)); // protocol version 9
    assert.match(
      (await b.next((f) => f.type === FromAgent.ERROR, 'error')).payload.toString(),
      /unsupported protocol version 9/,
    );
    b.child.kill();
  },
);

test('the parser: frames split anywhere are the same frames; a bad Docker frame type is one clear error', () => {
  const bytes = Buffer.concat([
    frame(FromAgent.HELLO, 0, Buffer.from('version=1\n')),
    frame(FromAgent.EXIT, 7, Buffer.from('exited\x000')),
  ]);
  const whole: AgentFrame[] = [];
  new AgentStreamParser(
    (f) => whole.push({ ...f, payload: Buffer.from(f.payload) }),
    () => undefined,
    assert.fail,
  ).push(dockerFrame(bytes));
  const split: AgentFrame[] = [];
  const p = new AgentStreamParser(
    (f) => split.push({ ...f, payload: Buffer.from(f.payload) }),
    () => undefined,
    assert.fail,
  );
  for (const b of dockerFrame(bytes)) p.push(Buffer.from([b]));
  assert.deepEqual(split, whole);
  assert.equal(whole.length, 2);
  const errors: string[] = [];
  const bad = new AgentStreamParser(
    () => assert.fail('no frame'),
    () => undefined,
    (e) => errors.push(e.message),
  );
  bad.push(Buffer.from([7, 0, 0, 0, 0, 0, 0, 1, 0]));
  bad.push(Buffer.from([1, 2, 3]));
  assert.deepEqual(errors, ['docker stream: unexpected frame type 7']);
});
