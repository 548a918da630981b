import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CommandExitError, ExecServerClient, type ExecServerHttpError, type OutputChunk } from '../../src/index.ts';
import { startServer } from '../support/harness.ts';

test('SDK: exec, wait, CommandExitError, stdin, resize, kill, UTF-8 split across chunks', {
  timeout: 120_000,
}, async (t) => {
  const server = await startServer({ flags: ['--token', 'tok'] });
  t.after(() => server.close());
  const client = await ExecServerClient.connect(server.url, { token: 'tok' });
  t.after(() => client.deleteSession().catch(() => undefined));
  assert.match(client.sessionId, /^[0-9a-f-]{36}$/);
  const sessions = await client.http.listSessions();
  assert.deepEqual(
    sessions.map((s) => s.sessionId),
    [client.sessionId],
  );

  const ok = await client.exec(['sh', '-c', 'echo out; echo err >&2']);
  const r = await ok.wait();
  assert.deepEqual([r.exitCode, r.stdout, r.stderr, r.terminal], [0, 'out\n', 'err\n', 'exited']);

  const bad = await client.exec(['sh', '-c', 'exit 3']);
  await assert.rejects(bad.wait(), (err: CommandExitError) => err instanceof CommandExitError && err.exitCode === 3);
  assert.equal((await bad.wait({ check: false })).exitCode, 3);

  const split = await client.exec(['sh', '-c', "printf '\\303'; sleep 0.3; printf '\\251\\n'"]);
  const chunks: OutputChunk[] = [];
  split.onOutput((c) => chunks.push(c));
  const s = await split.wait();
  assert.equal(s.stdout, 'é\n');
  assert.ok(!chunks.some((c) => c.text.includes('\uFFFD')));

  // A listener added late (here: after the end) still gets what was printed before it.
  const fast = await client.exec(['sh', '-c', 'echo early-out; echo early-err >&2']);
  await fast.wait();
  const late: string[] = [];
  fast.onOutput((c) => late.push(`${c.stream}:${c.text}`));
  assert.deepEqual(late.sort(), ['stderr:early-err\n', 'stdout:early-out\n']);

  const cat = await client.exec(['cat'], { stdin: 'hello stdin' });
  assert.equal((await cat.wait()).stdout, 'hello stdin');
  const piped = await client.exec(['sh', '-c', 'read x; echo "got:$x"'], { stdin: 'pipe' });
  await piped.sendStdin('abc\n');
  await piped.closeStdin();
  assert.equal((await piped.wait()).stdout, 'got:abc\n');

  const tty = await client.exec(['sh', '-c', 'stty size; read x; stty size'], {
    tty: true,
    size: { cols: 90, rows: 20 },
  });
  // Resize only once the first `stty size` has answered: under load the shell can take longer
  // than any fixed wait to get there, and would then print the new size twice.
  let before = '';
  tty.onOutput((c) => (before += c.text));
  for (const end = Date.now() + 10_000; !before.includes('20 90') && Date.now() < end; )
    await new Promise((res) => setTimeout(res, 20));
  assert.match(before, /20 90/, 'the first stty size');
  await tty.resize(132, 43);
  await tty.sendStdin('\n');
  assert.match((await tty.wait()).pty, /20 90\r\n[\s\S]*43 132\r\n$/);

  const sleeper = await client.exec(['sleep', '60'], { check: false });
  await sleeper.kill();
  const killed = await sleeper.wait();
  assert.equal(killed.terminal, 'terminated');
  assert.equal(killed.exitCode, 143);

  await assert.rejects(
    client.http.getSession('missing'),
    (err: ExecServerHttpError) => err.status === 404 && err.code === 'EXEC_ERR_SESSION_NOT_FOUND',
  );
});

test('SDK: resume after a dropped connection fills the gap from the last seq; every byte once, in order', {
  timeout: 120_000,
}, async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const client = await ExecServerClient.connect(server.url, { autoReconnect: { attempts: 20, delayMs: 100 } });
  t.after(() => client.deleteSession().catch(() => undefined));
  const proc = await client.exec([
    'sh',
    '-c',
    'i=1; while [ $i -le 300 ]; do echo "line-$i"; i=$((i+1)); sleep 0.005; done',
  ]);
  const seqs: number[] = [];
  proc.onOutput((c) => seqs.push(c.seq));
  // Drop the socket twice while output flows; the client resumes on its own.
  for (let drop = 0; drop < 2; drop++) {
    await new Promise((res) => setTimeout(res, 400));
    client.connection.socket.terminate();
  }
  const result = await proc.wait();
  const expected = Array.from({ length: 300 }, (_, i) => `line-${i + 1}\n`).join('');
  assert.equal(result.stdout, expected);
  assert.deepEqual(
    seqs,
    [...seqs].sort((a, b) => a - b),
  );
  assert.equal(new Set(seqs).size, seqs.length, 'no chunk twice');
  assert.ok(client.connected);
  // A fresh client can attach to a process of the session and replay it from the start.
  const bg = await client.exec(['sh', '-c', 'echo early; sleep 1; echo late']);
  await new Promise((res) => setTimeout(res, 300));
  await client.disconnect();
  const again = await ExecServerClient.connect(server.url, { resumeSessionId: client.sessionId });
  t.after(() => again.disconnect());
  assert.equal(again.sessionId, client.sessionId);
  const attached = await again.attach(bg.processId);
  assert.equal((await attached.wait()).stdout, 'early\nlate\n');
});
