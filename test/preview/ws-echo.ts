/**
 * The WebSocket echo server the preview tests run inside a session (ws-echo.c, built statically
 * so that it runs in the busybox image too), and a client's side of it.
 */
import { execFile } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import WebSocket from 'ws';

const run = promisify(execFile);
let wsEchoBinary: Promise<string> | undefined;

/** The path of test/preview/ws-echo.c built (once per test process). */
export function wsEcho(): Promise<string> {
  wsEchoBinary ??= (async () => {
    const out = join(await mkdtemp(join(tmpdir(), 'ws-echo-')), 'ws-echo');
    await run('cc', ['-O2', '-static', '-o', out, fileURLToPath(new URL('./ws-echo.c', import.meta.url))]);
    return out;
  })();
  return wsEchoBinary;
}

/** An open WebSocket to `url`, or the reason it did not open. */
export function wsOpen(url: string, headers: Record<string, string>, protocols: string[]): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, protocols, { headers });
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
    ws.once('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
  });
}

/** The next text message `ws` receives. */
export function nextMessage(ws: WebSocket): Promise<string> {
  return new Promise((resolve, reject) => {
    ws.once('message', (data) => resolve(String(data)));
    ws.once('close', () => reject(new Error('closed')));
  });
}
