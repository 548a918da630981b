/**
 * Agent links against a real engine (docs/docker-backend.md, "Agent links"): the server listens
 * in a directory it shares with the engine's host, mounted read-only into the container, and
 * the agent connects out to it; that directory stays private and goes with its container, a
 * killed agent is replaced and connects again, and a server whose directory the engine cannot
 * see falls back to the attached exec.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { BackendSession } from '../../src/backends/types.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';
import { docker, makeBackend, RecordingSink, sessionSpec, sleep, spawnRequest } from './helpers.ts';
import { tempDirFor } from '../support/temp-dir.ts';

const execFileP = promisify(execFile);

async function run(session: BackendSession, argv: string[], sandboxed = false): Promise<RecordingSink> {
  const sink = new RecordingSink();
  const sandbox = { kind: 'restricted', writableRoots: ['/workspace'], denyRead: [], network: false } as const;
  await session.spawn(spawnRequest(argv, sandboxed ? { sandbox } : {}), sink);
  await sink.exited;
  return sink;
}

/** The per-container directories under a socket root (one level for the server instance). */
async function containerDirs(root: string): Promise<string[]> {
  const instances = await readdir(root).catch(() => [] as string[]);
  const dirs: string[] = [];
  for (const i of instances) for (const d of await readdir(join(root, i))) dirs.push(join(root, i, d));
  return dirs;
}

test(
  'agent link: output read through the server-owned socket, read-only and root-only in the container, replaced agent connects again, gone with the container',
  dockerTestOptions,
  async (t) => {
    const root = await tempDirFor(t, 'exec-server-sockets-');
    const backend = makeBackend({ agentSocketDir: root });
    t.after(() => backend.close());
    const session = await backend.createSession(sessionSpec());
    assert.equal(session.execPath, 'agent');
    assert.equal(session.agentTransport, 'socket');

    const big = await run(session, ['sh', '-c', "head -c 4000000 /dev/zero | tr '\\0' a; echo done >&2"]);
    assert.equal(big.text('stdout'), 'a'.repeat(4_000_000));
    assert.equal(big.text('stderr'), 'done\n');
    assert.deepEqual(big.violations, []);

    const [dir, ...more] = await containerDirs(root);
    assert.ok(dir !== undefined && more.length === 0, `one directory per container: ${dir} ${more}`);
    assert.equal((await stat(dir)).mode & 0o777, 0o700);
    assert.equal((await stat(join(dir, 's'))).mode & 0o777, 0o700);
    assert.equal((await stat(join(dir, 'secret'))).mode & 0o777, 0o600);
    assert.ok((await stat(join(dir, 's', 'agent.sock'))).isSocket());
    // The sandbox user cannot reach the link; root sees it read-only, without the secret file.
    const peek = await run(session, ['ls', '/run/exec-server/r/link'], true);
    assert.match(peek.text('stderr'), /Permission denied/);
    const rootPeek = await run(session, [
      'sh',
      '-c',
      'ls -A /run/exec-server/r/link; touch /run/exec-server/r/link/x 2>&1; rm -f /run/exec-server/r/link/agent.sock 2>&1',
    ]);
    assert.match(rootPeek.text(), /^agent\.sock\n/);
    assert.match(rootPeek.text(), /Read-only file system/);
    assert.ok((await stat(join(dir, 's', 'agent.sock'))).isSocket());

    // The daemon killed mid-command: its command is lost, the next one gets a new daemon,
    // reached directly again.
    const sleeping = new RecordingSink();
    await session.spawn(spawnRequest(['sh', '-c', 'echo started; sleep 300']), sleeping);
    while (!sleeping.text().includes('started')) await sleep(10);
    await docker(
      'exec',
      session.containerId!,
      'sh',
      '-c',
      'for d in /proc/[0-9]*; do case "$(tr "\\0" " " <$d/cmdline 2>/dev/null)" in *exec-agent\\ start*) kill -9 "${d#/proc/}";; esac; done',
    );
    const lost = await sleeping.exited;
    assert.equal(lost.kind, 'lost');
    assert.equal((await run(session, ['echo', 'again'])).text(), 'again\n');
    assert.equal(session.agentTransport, 'socket');

    await session.destroy();
    const deadline = Date.now() + 10_000;
    while ((await containerDirs(root)).length > 0 && Date.now() < deadline) await sleep(50);
    assert.deepEqual(await containerDirs(root), [], 'the directory went with its container');
  },
);

test(
  "a server whose socket directory the engine's host does not have: containers without the mount, agents through the engine",
  dockerTestOptions,
  async () => {
    // The server runs in a mount namespace of its own with a tmpfs over its socket root, as a
    // server in another container would: the engine cannot see that directory.
    const root = await mkdtemp(join(tmpdir(), 'exec-server-unshared-'));
    try {
      const script = join(import.meta.dirname, 'unshared-socket-dir.ts');
      const { stdout } = await execFileP(
        'unshare',
        [
          '--mount',
          '--propagation',
          'private',
          'sh',
          '-c',
          'mount -t tmpfs tmpfs "$1" && exec "$2" --import tsx "$3" "$1" "$4"',
          'sh',
          root,
          process.execPath,
          script,
          TEST_IMAGE,
        ],
        { timeout: 120_000 },
      );
      const facts = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as Record<string, unknown>;
      assert.deepEqual(facts, {
        execPath: 'agent',
        transport: 'exec-stream',
        output: 'through the engine\n',
        mounts: [],
        second: 'exec-stream',
      });
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  },
);
