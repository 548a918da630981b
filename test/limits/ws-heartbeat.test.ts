/**
 * The WebSocket heartbeat (src/transport/websocket-route.ts `heartbeat`): every
 * `--ws-ping-interval-ms` each WebSocket is pinged, and one whose peer answered nothing since
 * the previous ping (gone without a close) is dropped, giving back its places; its session
 * stays for a resume. A client that answers pings (every library does by itself) stays however
 * long it idles; 0 turns the heartbeat off. Real server (local backend), small intervals.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import WebSocket from 'ws';
import { RpcConnection } from '../../src/client/rpc-connection.ts';
import { startServer, within, type TestServer } from '../support/harness.ts';
import { requestJson } from '../http/helpers.ts';

const ACME = 'tenant-secret-acme';
const PING_MS = 300;
/** How long past its bound a drop may come on a busy machine. */
const SLACK_MS = 2500;

/** A WebSocket that initializes a session and then answers no ping (a peer that is gone). */
async function mute(server: TestServer): Promise<{ socket: WebSocket; sessionId: string; closed: Promise<number> }> {
  const socket = new WebSocket(server.url, { headers: { authorization: `Bearer ${ACME}` }, autoPong: false });
  const closed = new Promise<number>((resolve) => socket.once('close', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve());
    socket.once('error', reject);
  });
  const answer = new Promise<{ result: { sessionId: string } }>((resolve) =>
    socket.once('message', (data) => resolve(JSON.parse(String(data)) as { result: { sessionId: string } })),
  );
  socket.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { clientName: 'mute' } }));
  const { result } = await answer;
  socket.send(JSON.stringify({ jsonrpc: '2.0', method: 'initialized', params: {} }));
  return { socket, sessionId: result.sessionId, closed };
}

async function metricsText(server: TestServer): Promise<string> {
  return String((await requestJson<string>(`${server.httpUrl}/metrics`, 'GET', undefined, ACME)).body);
}

test('a WebSocket whose peer answers no ping is dropped; its place comes back and its session stays', async (t) => {
  const flags = ['--tokens', `acme:${ACME}`, '--ws-ping-interval-ms', String(PING_MS)];
  const server = await startServer({ flags: [...flags, '--max-websockets-per-tenant', '1'] });
  t.after(() => server.close());
  const gone = await mute(server);
  t.after(() => gone.socket.terminate());
  const start = Date.now();
  // Dropped without a close frame (1006 on this side): the peer is taken to be gone.
  const code = await within(gone.closed, 2 * PING_MS + SLACK_MS, 'a peer answering no ping dropped');
  assert.equal(code, 1006);
  assert.ok(Date.now() - start >= PING_MS * 0.9, 'not before a ping went unanswered');
  assert.match(await metricsText(server), /exec_server_connections_refused_total\{limit="ping"\} 1\b/);
  // The tenant's only WebSocket place came back, and the session is there to resume.
  const back = await RpcConnection.open(server.url, { token: ACME });
  t.after(() => back.close());
  const resumed = (await back.request('initialize', { clientName: 'back', resumeSessionId: gone.sessionId })) as {
    sessionId: string;
  };
  assert.equal(resumed.sessionId, gone.sessionId);
  back.notify('initialized', {});
  // A client that answers pings idles through many intervals untouched.
  let cut: number | undefined;
  back.socket.once('close', (c) => {
    cut = c;
  });
  let pings = 0;
  back.socket.on('ping', () => pings++);
  await new Promise((r) => setTimeout(r, 8 * PING_MS));
  assert.ok(pings >= 3, `pinged while idle (${pings})`);
  assert.equal(cut, undefined, 'an idle client that answers pings was dropped');
  const info = (await back.request('session/info', {})) as { sessionId: string };
  assert.equal(info.sessionId, gone.sessionId);
  assert.match(await metricsText(server), /exec_server_connections_refused_total\{limit="ping"\} 1\b/);
});

test('--ws-ping-interval-ms 0: no pings, and a peer that would answer none stays', async (t) => {
  const server = await startServer({ flags: ['--tokens', `acme:${ACME}`, '--ws-ping-interval-ms', '0'] });
  t.after(() => server.close());
  const quiet = await mute(server);
  t.after(() => quiet.socket.terminate());
  let pings = 0;
  quiet.socket.on('ping', () => pings++);
  let cut: number | undefined;
  void quiet.closed.then((c) => {
    cut = c;
  });
  await new Promise((r) => setTimeout(r, 6 * PING_MS));
  assert.equal(pings, 0);
  assert.equal(cut, undefined);
  assert.equal(quiet.socket.readyState, WebSocket.OPEN);
});
