/**
 * Deny-read placeholders of servers that ended without removing them (SIGKILLed) are swept when
 * a local backend starts; those of live servers, and those whose owner cannot be told, stay;
 * a backend that closes removes its own.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { createLocalBackend } from '../../src/backends/local/local-backend.ts';
import { ownerTag } from '../../src/backends/local/placeholder-owners.ts';
import { silentLogger } from '../../src/logger.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const BUBBLEWRAP = fileURLToPath(new URL('../../src/backends/local/bubblewrap.ts', import.meta.url));

/** Another process that makes its placeholders under `stateDir` as a server does; resolves with their directory. */
async function placeholderOwner(stateDir: string, dir: string): Promise<{ child: ChildProcess; root: string }> {
  const script = join(dir, `owner-${Math.random().toString(16).slice(2)}.mts`);
  await writeFile(
    script,
    `import { DenyPlaceholders } from ${JSON.stringify(BUBBLEWRAP)};
const p = await DenyPlaceholders.create(process.argv[2]);
process.stdout.write(p.root + '\\n');
setInterval(() => undefined, 60_000);\n`,
  );
  const child = spawn(process.execPath, ['--import', 'tsx', script, stateDir], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const root = await new Promise<string>((resolve, reject) => {
    child.stdout!.setEncoding('utf8').once('data', (line: string) => resolve(line.trim()));
    child.once('exit', (code) => reject(new Error(`the placeholder owner exited (${code}) before making them`)));
  });
  return { child, root };
}

test('placeholders no live server owns are swept at start; a closing backend removes its own', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'exec-server-sweep-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const stateDir = join(dir, 'state');
  const killed = await placeholderOwner(stateDir, dir);
  const alive = await placeholderOwner(stateDir, dir);
  t.after(() => alive.child.kill('SIGKILL'));
  killed.child.kill('SIGKILL');
  await once(killed.child, 'exit');
  // This test's pid with another start time: the pid of an ended server, reused.
  const reused = join(stateDir, `deny-${process.pid}.1-aaaaaa`);
  // Another server in this very process (its own tag): live.
  const sameProcess = join(stateDir, `deny-${ownerTag()}-bbbbbb`);
  // Named before owners were recorded: whose it is cannot be told.
  const unowned = join(stateDir, 'deny-cccccc');
  for (const d of [reused, sameProcess, unowned]) await mkdir(join(d, 'dir'), { recursive: true, mode: 0o000 });
  assert.ok(existsSync(killed.root));

  const backend = await createLocalBackend(
    {
      workspaceRoot: join(dir, 'workspaces'),
      stateDir,
      bubblewrap: { available: false, path: 'bwrap', reason: 'not needed by this test' },
    },
    silentLogger,
  );
  let closed = false;
  // A failed assertion must not leave the backend open (its output channels hold the process).
  t.after(() => (closed ? undefined : backend.close()));
  const after = new Set(await readdir(stateDir));
  assert.ok(!existsSync(killed.root), 'the SIGKILLed server’s placeholders are swept');
  assert.ok(!existsSync(reused), 'a reused pid does not keep the ended server’s placeholders');
  assert.ok(existsSync(alive.root), 'a live server keeps its placeholders');
  assert.ok(existsSync(sameProcess), 'another server of this process keeps its placeholders');
  assert.ok(existsSync(unowned), 'placeholders of unknown owner are left alone');
  const own = [...after].filter((n) => n.startsWith(`deny-${ownerTag()}-`) && join(stateDir, n) !== sameProcess);
  assert.equal(own.length, 1, `the backend made its own: ${[...after].join(' ')}`);

  closed = true;
  await backend.close();
  assert.ok(!existsSync(join(stateDir, own[0]!)), 'a closed backend removes its own placeholders');
  assert.ok(existsSync(alive.root));
});
