/**
 * Egress across a server restart: a real server process with a session created with
 * `network.allow` is SIGKILLed; its successor (same instance id) re-adopts the session, asks the
 * agent for its proxy again and serves it: the allowed destination (a server of this test's own
 * on 127.0.0.2) is still reached and another port is still refused.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import type { SessionInfo } from '../../src/protocol/index.ts';
import { startDevServer } from '../support/dev-server.ts';
import { type ExecAnswer, requestJson } from '../http/helpers.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';

const BODY = 'still reachable after the restart\n';

test(
  'egress survives a server restart: the successor serves the re-adopted session’s proxy',
  dockerTestOptions,
  async (t) => {
    const origin = createServer((_req, res) => res.end(BODY));
    await new Promise<void>((r) => origin.listen(0, '127.0.0.2', r));
    t.after(() => origin.close());
    const port = (origin.address() as AddressInfo).port;
    const instanceId = `egress-restart-${randomUUID().slice(0, 8)}`;
    const first = await startDevServer({ image: TEST_IMAGE, instanceId });
    t.after(() => first.kill());
    const created = await requestJson<SessionInfo>(`${first.http}/v1/sessions`, 'POST', {
      network: { allow: [`127.0.0.2:${port}`] },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.sessionId;
    const exec = async (base: string, cmd: string): Promise<string> =>
      (
        await requestJson<ExecAnswer>(`${base}/v1/sessions/${id}/exec_command`, 'POST', {
          cmd,
          login: false,
          yield_time_ms: 10000,
        })
      ).body.output;
    assert.ok((await exec(first.http, `wget -q -O - http://127.0.0.2:${port}/`)).endsWith(BODY));

    await first.kill();
    const second = await startDevServer({ image: TEST_IMAGE, instanceId });
    t.after(async () => {
      await requestJson(`${second.http}/v1/sessions/${id}`, 'DELETE');
      await second.stop();
    });
    const info = await requestJson<SessionInfo>(`${second.http}/v1/sessions/${id}`, 'GET');
    assert.equal(info.status, 200);
    assert.deepEqual(info.body.egress?.allow, [`127.0.0.2:${port}`]);
    assert.ok((await exec(second.http, `wget -q -O - http://127.0.0.2:${port}/`)).endsWith(BODY));
    assert.match(await exec(second.http, `wget -q -O - http://127.0.0.2:1/ 2>&1`), /403 Forbidden/);
    const after = await requestJson<SessionInfo>(`${second.http}/v1/sessions/${id}`, 'GET');
    assert.equal(after.body.egress?.connections, 1);
    assert.equal(after.body.egress?.refused, 1);
  },
);
