/**
 * A file that grows or shrinks while an HTTP download of it runs, on both backends. The client
 * reads the head and the first bytes, then stops reading: backpressure holds the server's read
 * of the file well before its end (the file is larger than every buffer on the way). A command
 * of the session then appends to the file or truncates it, and the client reads on. HTTP allows
 * exactly the announced Content-Length bytes: a grown file gives its original bytes and nothing
 * more (an extra byte would be read as the start of the next answer on the connection); a
 * shrunk one gives a cut transfer on a closed connection, never a hang or padded bytes.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { HttpFiles } from '../../src/client/files.ts';
import { until } from '../support/until.ts';
import { BACKENDS, fsEnv, type FsEnv } from './helpers.ts';

const SIZE = 32 * 1024 * 1024;
/** What the truncated file keeps. */
const SMALL = 1024 * 1024;
/** Longer than any answer here should take. */
const BOUND_MS = 20_000;
const HEAD_END = Buffer.from('\r\n\r\n');

/** One HTTP/1.1 connection spoken by hand: what arrived, and whether the server closed it. */
class RawConnection {
  readonly #socket: Socket;
  /** What arrived, in chunks (joined when read: one join per chunk would copy the body many times). */
  #chunks: Buffer[] = [];
  /** Bytes in `#chunks`. */
  length = 0;
  /** Whether the connection still stops at the first body bytes. */
  #holding = true;
  closed = false;

  constructor(port: number) {
    this.#socket = connect(port, '127.0.0.1');
    this.#socket.on('data', (chunk: Buffer) => {
      this.#chunks.push(chunk);
      this.length += chunk.length;
      // Stops at the first body bytes: the server's read then waits for this client.
      if (this.#holding) {
        const head = this.received.indexOf(HEAD_END);
        if (head >= 0 && this.length > head + HEAD_END.length) this.#socket.pause();
      }
    });
    // A reset (the server aborting a body) is a close too.
    this.#socket.on('error', () => undefined);
    this.#socket.on('close', () => (this.closed = true));
  }

  get received(): Buffer {
    if (this.#chunks.length > 1) this.#chunks = [Buffer.concat(this.#chunks)];
    return this.#chunks[0] ?? Buffer.alloc(0);
  }

  get(path: string): void {
    this.#socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
  }

  /** Takes the first `n` bytes off what arrived (the next answer then starts at 0). */
  take(n: number): Buffer {
    const all = this.received;
    this.#chunks = [all.subarray(n)];
    this.length = all.length - Math.min(n, all.length);
    return all.subarray(0, n);
  }

  resume(): void {
    this.#holding = false;
    this.#socket.resume();
  }

  destroy(): void {
    this.#socket.destroy();
  }
}

/** The status line and headers of an answer at the start of `data`, and where its body starts. */
function parseHead(data: Buffer): { status: string; length: number; bodyAt: number } {
  const end = data.indexOf(HEAD_END);
  assert.ok(end >= 0, `no complete head in ${JSON.stringify(data.subarray(0, 200).toString('latin1'))}`);
  const lines = data.subarray(0, end).toString('latin1').split('\r\n');
  const length = lines
    .find((l) => /^content-length:/i.test(l))
    ?.split(':')[1]
    ?.trim();
  return { status: lines[0] ?? '', length: Number(length), bodyAt: end + HEAD_END.length };
}

/** A session with a `SIZE`-byte file, and a connection paused after the first bytes of its download. */
async function pausedDownload(
  t: Parameters<typeof fsEnv>[0],
  kind: FsEnv['kind'],
): Promise<{ env: FsEnv; conn: RawConnection; path: string; original: Buffer; length: number; bodyAt: number }> {
  const env = await fsEnv(t, kind);
  const path = `${env.workdir}/big.bin`;
  const original = randomBytes(SIZE);
  const files = new HttpFiles({ baseUrl: env.server.httpUrl, sessionId: env.session.sessionId });
  await files.upload(path, original);
  const port = Number(new URL(env.server.httpUrl).port);
  const conn = new RawConnection(port);
  t.after(() => conn.destroy());
  conn.get(`/v1/sessions/${env.session.sessionId}/files/content?path=${encodeURIComponent(path)}`);
  await until(
    'the head and the first body bytes of the download',
    () => {
      const head = conn.received.indexOf(HEAD_END);
      return head >= 0 && conn.length > head + HEAD_END.length;
    },
    BOUND_MS,
  );
  const { status, length, bodyAt } = parseHead(conn.received);
  assert.equal(status, 'HTTP/1.1 200 OK');
  assert.equal(length, SIZE);
  return { env, conn, path, original, length, bodyAt };
}

/** Runs `script` as a command of the session (the session's own user changes its file). */
async function inSession(env: FsEnv, id: string, script: string): Promise<void> {
  const r = await env.session.run(id, ['sh', '-c', script]);
  assert.equal(r.exited['exitCode'], 0, `${script}: ${r.stderr}`);
}

for (const { kind, options } of BACKENDS) {
  test(`${kind}: a file that grows during a download gives exactly its announced bytes`, options, async (t) => {
    const { env, conn, path, original, length, bodyAt } = await pausedDownload(t, kind);
    assert.ok(conn.length - bodyAt < length, 'the download is held before its end');
    await inSession(env, 'grow', `head -c ${4 * 1024 * 1024} /dev/urandom >> ${path}`);
    conn.resume();
    await until('the announced bytes', () => conn.closed || conn.length >= bodyAt + length, BOUND_MS);
    conn.take(bodyAt);
    const body = conn.take(length);
    assert.equal(body.length, length, 'every announced byte arrived');
    assert.ok(body.equals(original), 'the body is the file as it was announced');
    // The connection carries the next answer cleanly (no byte of the grown file before it), or
    // the server closed it with nothing more sent.
    const files = `/v1/sessions/${env.session.sessionId}/files`;
    if (!conn.closed) conn.get(`${files}/metadata?path=${encodeURIComponent(path)}`);
    await until(
      'the next answer on the connection',
      () => conn.closed || conn.received.indexOf(HEAD_END) >= 0,
      BOUND_MS,
    );
    if (conn.length === 0) assert.ok(conn.closed, 'nothing more, and the connection closed');
    else {
      // Compared as a short excerpt: a failure shows where the stray bytes start, not megabytes of them.
      const start = JSON.stringify(conn.received.subarray(0, 15).toString('latin1'));
      assert.equal(start, JSON.stringify('HTTP/1.1 200 OK'), 'the next answer starts where the body ended');
      const next = parseHead(conn.received);
      await until('the next body', () => conn.length >= next.bodyAt + next.length, BOUND_MS);
      const meta = JSON.parse(conn.received.subarray(next.bodyAt).toString('utf8')) as { size: number };
      assert.equal(meta.size, SIZE + 4 * 1024 * 1024, 'the file did grow');
    }
  });

  test(
    `${kind}: a file that shrinks during a download cuts the transfer and closes the connection`,
    options,
    async (t) => {
      const { env, conn, path, original, length, bodyAt } = await pausedDownload(t, kind);
      assert.ok(conn.length - bodyAt < length, 'the download is held before its end');
      await inSession(env, 'shrink', `truncate -s ${SMALL} ${path}`);
      conn.resume();
      await until('the server closes the connection of a cut transfer', () => conn.closed, BOUND_MS);
      const body = conn.received.subarray(bodyAt);
      assert.ok(body.length < length, `fewer bytes than announced (${body.length} of ${length})`);
      assert.ok(body.equals(original.subarray(0, body.length)), 'what arrived is the start of the file, nothing else');
      // The server goes on: a new connection is answered, with the file as it is now.
      const files = new HttpFiles({ baseUrl: env.server.httpUrl, sessionId: env.session.sessionId });
      assert.equal((await files.stat(path)).size, SMALL);
      const { stream, size } = await files.downloadStream(path);
      const chunks: Buffer[] = [];
      for await (const c of stream) chunks.push(c as Buffer);
      assert.equal(size, SMALL);
      assert.ok(Buffer.concat(chunks).equals(original.subarray(0, SMALL)), 'a new download gets the small file');
    },
  );
}
