/**
 * The time bounds on connections (src/transport/connection-limits.ts): a request head not
 * complete within `--headers-timeout-ms` and a request body that stops arriving for
 * `--request-idle-timeout-ms` are answered 400 and closed, a WebSocket that sends nothing within
 * `--ws-initialize-timeout-ms` of its upgrade is closed with 4002, and the places come back. A
 * slow upload that keeps sending completes, and an idle WebSocket with a session is never cut.
 * Real server (local backend), raw sockets on loopback, small timeouts.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import WebSocket from 'ws';
import { RpcConnection } from '../../src/client/rpc-connection.ts';
import { startServer, within, type TestServer } from '../support/harness.ts';
import { requestJson } from '../http/helpers.ts';

const ACME = 'tenant-secret-acme';
const HEADERS_MS = 400;
const IDLE_MS = 1000;
const INITIALIZE_MS = 500;
const FLAGS = [
  '--tokens',
  `acme:${ACME}`,
  '--headers-timeout-ms',
  String(HEADERS_MS),
  '--request-idle-timeout-ms',
  String(IDLE_MS),
  '--ws-initialize-timeout-ms',
  String(INITIALIZE_MS),
];
/** How long past its bound a close may come on a busy machine. */
const SLACK_MS = 2500;

interface Exchange {
  readonly socket: Socket;
  /** What the server sent until it closed the connection, and when (ms after connecting). */
  readonly closed: Promise<{ got: string; ms: number }>;
}

/** A raw connection to the server; `opened` runs once it is connected. */
function exchange(server: TestServer, opened: (s: Socket) => void = () => undefined): Exchange {
  const start = Date.now();
  const socket = connect(Number(new URL(server.httpUrl).port), '127.0.0.1', () => opened(socket));
  let got = '';
  socket.on('data', (d) => {
    got += d.toString('latin1');
  });
  socket.on('error', () => undefined);
  const closed = new Promise<{ got: string; ms: number }>((resolve) =>
    socket.once('close', () => resolve({ got, ms: Date.now() - start })),
  );
  return { socket, closed };
}

/** Polls `f` until it returns true, for at most 10 s. */
async function eventually(what: string, f: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await f())) {
    if (Date.now() > deadline) throw new Error(`not within 10 s: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function metricsText(server: TestServer): Promise<string> {
  return String((await requestJson<string>(`${server.httpUrl}/metrics`, 'GET', undefined, ACME)).body);
}

function assertAnswered(got: string, status: string, message: RegExp): void {
  assert.match(got, new RegExp(`^HTTP/1.1 ${status}`), got);
  assert.match(got, /"code":"EXEC_ERR_INVALID_REQUEST"/, got);
  assert.match(got, message, got);
}

test('a request head not complete in time is answered 400 and closed; the places come back', async (t) => {
  const server = await startServer({ flags: [...FLAGS, '--max-connections', '16'] });
  t.after(() => server.close());
  // Every place taken by connections that send nothing.
  const silent = Array.from({ length: 16 }, () => exchange(server));
  t.after(() => {
    for (const s of silent) s.socket.destroy();
  });
  // A head sent a byte at a time, quick enough for the idle timeout, never complete.
  const head = 'GET /healthz HTTP/1.1\r\nhost: x\r\nx-pad: '.padEnd(4000, 'a');
  let sent = 0;
  let drip: NodeJS.Timeout | undefined;
  const trickle = exchange(server, (s) => {
    drip = setInterval(() => s.writable && s.write(head[sent++ % head.length] ?? 'a'), 50);
  });
  t.after(() => clearInterval(drip));
  for (const { closed } of [...silent, trickle]) {
    const { got, ms } = await within(closed, HEADERS_MS + SLACK_MS, 'a head timeout');
    assertAnswered(got, '400', /request head not complete in time/);
    assert.ok(ms >= HEADERS_MS * 0.9, `closed after ${ms} ms, before the headers timeout`);
  }
  assert.ok(sent > 4, 'the head was still arriving when it was cut');
  await eventually('a request is served once the places came back', async () => {
    const r = await requestJson(`${server.httpUrl}/healthz`, 'GET').catch(() => undefined);
    return r?.status === 200;
  });
  assert.match(await metricsText(server), /exec_server_connections_refused_total\{limit="headers"\} (1[7-9]|[2-9]\d)/);
});

test('a request body that stops arriving is answered 400 and closed; a slow one that progresses completes', async (t) => {
  const server = await startServer({ flags: FLAGS });
  t.after(() => server.close());
  const workdir = await realpath(await mkdtemp(join(tmpdir(), 'idle-conn-')));
  t.after(() => rm(workdir, { recursive: true, force: true }));
  const made = await requestJson<{ sessionId: string }>(`${server.httpUrl}/v1/sessions`, 'POST', { workdir }, ACME);
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const target = join(workdir, 'up.bin');
  const put = (length: number): string =>
    `PUT /v1/sessions/${made.body.sessionId}/files/content?path=${encodeURIComponent(target)} HTTP/1.1\r\n` +
    `host: x\r\nauthorization: Bearer ${ACME}\r\ncontent-type: application/octet-stream\r\n` +
    `content-length: ${length}\r\n\r\n`;

  const stalled = exchange(server, (s) => s.write(`${put(1000)}some bytes, then nothing`));
  const { got, ms } = await within(stalled.closed, IDLE_MS + SLACK_MS, 'a body idle timeout');
  assertAnswered(got, '400', /request body: nothing received for 1000 ms \(--request-idle-timeout-ms\)/);
  assert.ok(ms >= IDLE_MS * 0.9, `closed after ${ms} ms, before the idle timeout`);

  // 12 chunks 0.3 s apart: 3.6 s in all, longer than every timeout, never 1 s without a byte.
  const chunks = Array.from({ length: 12 }, (_, i) => `chunk ${String(i).padStart(2, '0')};`);
  const slow = exchange(server, (s) => {
    s.write(put(chunks.join('').length));
    let i = 0;
    const drip = setInterval(() => {
      if (i === chunks.length || !s.writable) return void clearInterval(drip);
      s.write(chunks[i++] ?? '');
    }, 300);
  });
  const answered = new Promise<string>((resolve) => {
    let text = '';
    slow.socket.on('data', (d) => {
      text += d.toString();
      if (text.includes('bytesWritten')) resolve(text);
    });
  });
  const upload = await within(answered, 15_000, 'the slow upload');
  slow.socket.destroy();
  assert.match(upload, /^HTTP\/1.1 200/, upload);
  assert.equal(await readFile(target, 'utf8'), chunks.join(''));
  // The server's turn is never cut: a call that runs longer than the idle timeout, silent meanwhile.
  const call = {
    type: 'function_call',
    call_id: 'call_1',
    name: 'exec_command',
    arguments: JSON.stringify({ cmd: 'sleep 2.5; echo done', yield_time_ms: 10_000 }),
  };
  const started = Date.now();
  const ran = await requestJson<{ output: string }>(
    `${server.httpUrl}/v1/sessions/${made.body.sessionId}/tool-calls`,
    'POST',
    call,
    ACME,
  );
  assert.equal(ran.status, 200, JSON.stringify(ran.body));
  assert.match(JSON.stringify(ran.body), /done/);
  assert.ok(Date.now() - started >= 2 * IDLE_MS, 'the call ran longer than the idle timeout');
  assert.match(await metricsText(server), /exec_server_connections_refused_total\{limit="idle"\} 1\b/);
});

test('a WebSocket silent after its upgrade is closed with 4002; an idle one with a session stays', async (t) => {
  const server = await startServer({ flags: [...FLAGS, '--max-websockets-per-tenant', '1'] });
  t.after(() => server.close());
  const silent = new WebSocket(server.url, { headers: { authorization: `Bearer ${ACME}` } });
  const start = Date.now();
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    silent.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
  );
  const { code, reason } = await within(closed, INITIALIZE_MS + SLACK_MS, 'the initialize deadline');
  assert.equal(code, 4002);
  assert.match(reason, /no message within 500 ms of the upgrade; send initialize first/);
  assert.ok(Date.now() - start >= INITIALIZE_MS * 0.9);
  // A client that answers neither the upgrade nor the close loses its socket a moment later.
  const raw = exchange(server, (s) =>
    s.write(
      `GET /v1/ws HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${ACME}\r\nupgrade: websocket\r\n` +
        'connection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n',
    ),
  );
  const dropped = await within(raw.closed, INITIALIZE_MS + 1000 + SLACK_MS, 'a silent WebSocket dropped');
  assert.match(dropped.got, /^HTTP\/1.1 101 /);
  // The close frame: opcode 8, then the code 4002 (0x0fa2) and the reason.
  assert.ok(dropped.got.includes('\x88'), dropped.got);
  assert.ok(dropped.got.includes('\x0f\xa2no message within'), dropped.got);
  // The tenant's only WebSocket place came back: a client that initializes gets it.
  let live: RpcConnection | undefined;
  await eventually("the tenant's place came back", async () => {
    live = await RpcConnection.open(server.url, { token: ACME }).catch(() => undefined);
    return live !== undefined;
  });
  assert.ok(live);
  t.after(() => live?.close());
  let cut: number | undefined;
  live.socket.once('close', (c) => {
    cut = c;
  });
  const init = (await live.request('initialize', { clientName: 'idle-client' })) as { sessionId: string };
  live.notify('initialized', {});
  // Idle past every bound: a body left unsent on another connection is cut meanwhile.
  const unsent =
    `POST /v1/sessions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${ACME}\r\n` +
    'content-type: application/json\r\ncontent-length: 9\r\n\r\n';
  for (let i = 0; i < 2; i++) {
    const stalled = exchange(server, (s) => s.write(unsent));
    const { got } = await within(stalled.closed, IDLE_MS + SLACK_MS, 'a body idle timeout');
    assertAnswered(got, '400', /request body: nothing received/);
  }
  assert.equal(cut, undefined, 'the idle WebSocket with a session was closed');
  const info = (await live.request('session/info', {})) as { sessionId: string };
  assert.equal(info.sessionId, init.sessionId);
  assert.match(await metricsText(server), /exec_server_connections_refused_total\{limit="initialize"\} 2\b/);
});

test('a download the client stops reading is closed; one read slowly completes', async (t) => {
  const server = await startServer({ flags: FLAGS });
  t.after(() => server.close());
  const workdir = await realpath(await mkdtemp(join(tmpdir(), 'idle-conn-')));
  t.after(() => rm(workdir, { recursive: true, force: true }));
  // Larger than what the loopback's socket buffers hold, so that a reader that stops stalls the server.
  const size = 64 * 1024 * 1024;
  await writeFile(join(workdir, 'big.bin'), Buffer.alloc(size, 7));
  const made = await requestJson<{ sessionId: string }>(`${server.httpUrl}/v1/sessions`, 'POST', { workdir }, ACME);
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const get =
    `GET /v1/sessions/${made.body.sessionId}/files/content?path=${encodeURIComponent(join(workdir, 'big.bin'))} ` +
    `HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${ACME}\r\n\r\n`;
  /** Bytes received on `s`, the head included. */
  const received = (s: Socket): (() => number) => {
    let n = 0;
    s.on('data', (d: Buffer) => {
      n += d.length;
    });
    return () => n;
  };

  const stopped = exchange(server, (s) => s.write(get));
  const stoppedBytes = received(stopped.socket);
  await eventually('the first bytes of the download', async () => stoppedBytes() > 0);
  stopped.socket.pause();
  await eventually('the unread download is closed', async () =>
    /exec_server_connections_refused_total\{limit="idle"\} 1\b/.test(await metricsText(server)),
  );
  stopped.socket.resume();
  await within(stopped.closed, 10_000, 'the end of the cut download');
  assert.ok(stoppedBytes() < size, `the whole file arrived (${stoppedBytes()} bytes)`);

  // Read 4 MiB every 0.3 s: slower than the server sends, never 1 s without reading.
  const slow = exchange(server, (s) => s.write(get));
  const slowBytes = received(slow.socket);
  let allowed = 4 * 1024 * 1024;
  const reader = setInterval(() => {
    allowed += 4 * 1024 * 1024;
    slow.socket.resume();
  }, 300);
  t.after(() => clearInterval(reader));
  const whole = new Promise<void>((resolve) =>
    slow.socket.on('data', () => {
      if (slowBytes() > size) resolve();
      else if (slowBytes() >= allowed) slow.socket.pause();
    }),
  );
  await within(whole, 30_000, 'the slow download');
  clearInterval(reader);
  slow.socket.destroy();
  assert.match(await metricsText(server), /exec_server_connections_refused_total\{limit="idle"\} 1\b/);
});
