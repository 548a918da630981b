/**
 * The server's side of an agent link (src/backends/docker/agent/agent-link.ts) over real unix
 * sockets: only a connection that greets with the container's secret is handed on, and a
 * restarted server reopens only a directory and secret that are its own and not links.
 */
import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { AgentLink, LINK_MAGIC } from '../../src/backends/docker/agent/agent-link.ts';

const log = { info: () => undefined, warn: () => undefined, error: () => undefined, debug: () => undefined };

function dial(path: string, greeting: Buffer): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(path, () => {
      s.write(greeting);
      resolve(s);
    });
    s.once('error', reject);
  });
}

const closed = (s: Socket): Promise<void> => new Promise((r) => (s.destroyed ? r() : s.once('close', () => r())));

async function tempRoot(t: { after: (f: () => Promise<void>) => void }): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'agent-link-'));
  t.after(() => rm(root, { recursive: true, force: true }));
  return root;
}

test('a link hands on the connection with its secret and refuses the others', async (t) => {
  const link = await AgentLink.create(join(await tempRoot(t), 'c1'), log);
  t.after(() => link.close());
  const socketPath = join(link.mountSource, 'agent.sock');
  const secret = Buffer.from(link.secretHex, 'hex');

  const wrong = await dial(socketPath, Buffer.concat([LINK_MAGIC, Buffer.alloc(32, 1)]));
  const notAgent = await dial(socketPath, Buffer.concat([Buffer.from('GET / HT'), secret]));
  await Promise.all([closed(wrong), closed(notAgent)]);
  assert.equal(link.refused, 2);
  assert.equal(link.take(), undefined, 'nothing refused is handed on');

  const waiting = link.next(5_000);
  const agent = await dial(socketPath, Buffer.concat([LINK_MAGIC, secret, Buffer.from('rest')]));
  t.after(() => agent.destroy());
  const got = await waiting;
  assert.ok(got !== undefined);
  // Bytes after the greeting are the protocol's: they reach whoever reads the socket next.
  const first = await new Promise<Buffer>((r) => {
    got.once('data', r);
    got.resume();
  });
  assert.equal(first.toString(), 'rest');
  got.destroy();

  // One that comes while nobody waits is kept for the next use (the newest wins).
  const older = await dial(socketPath, Buffer.concat([LINK_MAGIC, secret]));
  const newer = await dial(socketPath, Buffer.concat([LINK_MAGIC, secret]));
  await closed(older);
  const kept = link.take();
  assert.ok(kept !== undefined);
  kept.destroy();
  newer.destroy();
});

test('reopen: the same secret at the same path; a directory or secret that is a link or open to others is refused', async (t) => {
  const root = await tempRoot(t);
  const dir = join(root, 'c2');
  const made = await AgentLink.create(dir, log);
  const secretHex = made.secretHex;
  made.close();

  const again = await AgentLink.reopen(dir, log);
  assert.equal(again.secretHex, secretHex);
  const waiting = again.next(5_000);
  const agent = await dial(join(dir, 's', 'agent.sock'), Buffer.concat([LINK_MAGIC, Buffer.from(secretHex, 'hex')]));
  assert.ok((await waiting) !== undefined);
  agent.destroy();
  again.close();

  // The secret replaced by a link to a file of the attacker's choosing.
  const elsewhere = join(root, 'elsewhere');
  await writeFile(elsewhere, 'f'.repeat(64), { mode: 0o600 });
  await unlink(join(dir, 'secret'));
  await symlink(elsewhere, join(dir, 'secret'));
  await assert.rejects(AgentLink.reopen(dir, log), /not the server's private file/);
  await unlink(join(dir, 'secret'));
  await writeFile(join(dir, 'secret'), secretHex, { mode: 0o600 });
  await chmod(join(dir, 's'), 0o755);
  await assert.rejects(AgentLink.reopen(dir, log), /not the server's private directory/);
  await chmod(join(dir, 's'), 0o700);
  const linkDir = join(root, 'c3');
  await symlink(dir, linkDir);
  await assert.rejects(AgentLink.reopen(linkDir, log), /not the server's private directory/);
  assert.equal(await readFile(join(dir, 'secret'), 'utf8'), secretHex);
});
