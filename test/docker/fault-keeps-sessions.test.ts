/**
 * A server that dies of a fault of its own (an uncaught exception) keeps its docker sessions for
 * the next start, as a killed one does: ending them would make every user pay for the server's
 * bug. The next server with the same instance id re-adopts them (src/main.ts, src/app.ts).
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { requestJson } from '../http/helpers.ts';
import { startServer } from '../support/harness.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';

const MAIN = fileURLToPath(new URL('../../src/main.ts', import.meta.url));
const FAULT = fileURLToPath(new URL('../support/fault-on-signal.ts', import.meta.url));

test('a fatal fault keeps the sessions; the next server re-adopts them', dockerTestOptions, async (t) => {
  const instanceId = `fault-${process.pid}-${Date.now()}`;
  const flags = ['--backend', 'docker', '--image', TEST_IMAGE, '--warm-pool', '0', '--token', 'tok'];
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      '--import',
      FAULT,
      MAIN,
      'serve',
      '--listen',
      'ws://127.0.0.1:0',
      '--instance-id',
      instanceId,
      ...flags,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  t.after(() => child.kill('SIGKILL'));
  let err = '';
  child.stderr.on('data', (d) => (err += String(d)));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += String(d);
      const line = /^(ws:\/\/\S+)\n/m.exec(out)?.[1];
      if (line) resolve(line);
    });
    void exited.then(() => reject(new Error(`the server exited before listening: ${err}`)));
  });
  const http = url.replace(/^ws:/, 'http:');
  const made = await requestJson<{ sessionId: string; containerId: string }>(`${http}/v1/sessions`, 'POST', {}, 'tok');
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const { sessionId, containerId } = made.body;

  child.kill('SIGWINCH');
  await exited;
  assert.match(err, /shutting down after an error/);
  assert.match(err, /"sessions":"kept"/);
  const running = execFileSync('docker', ['inspect', '-f', '{{.State.Running}}', containerId], { encoding: 'utf8' });
  assert.equal(running.trim(), 'true', 'the container outlived the server');

  const next = await startServer({ backend: 'docker', instanceId, flags: ['--token', 'tok', '--warm-pool', '0'] });
  t.after(() => next.close());
  const again = await requestJson(`${next.httpUrl}/v1/sessions/${sessionId}`, 'GET', undefined, 'tok');
  assert.equal(again.status, 200, JSON.stringify(again.body));
  const ran = await requestJson<{ exit_code?: number; output?: string }>(
    `${next.httpUrl}/v1/sessions/${sessionId}/exec_command`,
    'POST',
    { cmd: 'echo re-adopted' },
    'tok',
  );
  assert.equal(ran.status, 200, JSON.stringify(ran.body));
  assert.match(String(ran.body.output), /re-adopted/);
});
