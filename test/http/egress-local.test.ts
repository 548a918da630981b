/**
 * `network.allow` on the local backend (docs/architecture.md, "Egress"): a sandboxed command
 * (bubblewrap, its own network namespace) reaches the allowed destination, a server of this
 * test's own on 127.0.0.2, through the proxy the wrapper serves in its namespace (24 MB too); another port is
 * refused with 403, a direct connection fails; an unsandboxed session cannot have an allow-list
 * (501), and a malformed entry is a 400 naming it.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { ExecServerClient } from '../../src/client/index.ts';
import type { SessionInfo } from '../../src/protocol/index.ts';
import { type ExecAnswer, newSession, serverWithApi } from './helpers.ts';

const BODY = 'hello from the local egress test\n';
/** Three times a command's unread-stdin budget: a download that must stream, not be held. */
const BIG = 24 << 20;

test('local backend: egress through the sandbox namespace, refusals, and what cannot have it', async (t) => {
  const origin = createServer((req, res) => res.end(req.url === '/big' ? Buffer.alloc(BIG, 0x61) : BODY));
  await new Promise<void>((r) => origin.listen(0, '127.0.0.2', r));
  t.after(() => origin.close());
  const port = (origin.address() as AddressInfo).port;
  const api = await serverWithApi(t);

  const bad = await api('POST', '/v1/sessions', { network: { allow: ['10.0.0.0/40'] } });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.code, 'EXEC_ERR_INVALID_PARAMS');
  assert.match(String(bad.body.message), /session\.network\.allow\[0\] "10\.0\.0\.0\/40": prefix/);
  const extra = await api('POST', '/v1/sessions', { network: { allow: ['*'], deny: [] } });
  assert.equal(extra.status, 400, 'unknown fields are refused');
  const unsandboxed = await api('POST', '/v1/sessions', {
    network: { allow: ['*'] },
    sandbox: { type: 'danger-full-access' },
  });
  assert.equal(unsandboxed.status, 501);
  assert.equal(unsandboxed.body.code, 'EXEC_ERR_UNSUPPORTED');
  assert.equal((await api<{ sessions: unknown[] }>('GET', '/v1/sessions')).body.sessions.length, 0);

  const id = await newSession(api, { network: { allow: [`127.0.0.2:${port}`] } });
  const exec = async (cmd: string): Promise<string> =>
    (await api<ExecAnswer>('POST', `/v1/sessions/${id}/exec_command`, { cmd, login: false, yield_time_ms: 10000 })).body
      .output;
  assert.ok((await exec(`wget -q -O - http://127.0.0.2:${port}/`)).endsWith(BODY));
  assert.match(await exec(`wget -q -O - http://127.0.0.2:${port}/big | wc -c`), new RegExp(`^\\s*${BIG}\\s*$`, 'm'));
  assert.match(await exec(`curl -s -o /dev/null -w '%{http_code}' http://127.0.0.2:1/`), /403/);
  const direct = await exec(`curl -s --noproxy '*' -m 3 http://127.0.0.2:${port}/; echo "exit=$?"`);
  assert.match(direct, /exit=[1-9]/);
  assert.doesNotMatch(direct, /hello from the local egress test/);
  const info = (await api<SessionInfo>('GET', `/v1/sessions/${id}`)).body;
  assert.equal(info.egress?.connections, 2);
  assert.equal(info.egress?.refused, 1);
  assert.ok((info.egress?.bytesIn ?? 0) > BIG, `bytes in: ${info.egress?.bytesIn}`);

  // The same through the WebSocket `initialize` session options and the TypeScript SDK.
  const client = await ExecServerClient.connect(api.server.url, {
    session: { network: { allow: [`127.0.0.2:${port}`] } },
  });
  try {
    const result = await (await client.exec(['wget', '-q', '-O', '-', `http://127.0.0.2:${port}/`])).wait();
    assert.equal(result.stdout, BODY);
    const wsInfo = (await api<SessionInfo>('GET', `/v1/sessions/${client.sessionId}`)).body;
    assert.equal(wsInfo.egress?.proxy, 'http://127.0.0.1:3128');
  } finally {
    await client.deleteSession();
  }
});
