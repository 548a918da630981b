/**
 * Starts that cannot happen get one answer on both backends (docs/protocol.md, "Starts that
 * cannot happen"): a cwd that is a file, a cwd that does not exist, a program that does not
 * exist, a program that is not executable. `process/start` fails with EXEC_ERR_SPAWN_FAILED
 * (JSON-RPC -32603, as the reference Codex exec-server answers), the message in the same words
 * on both, and no process is left behind: the id is free again and the session keeps working.
 * In pipe and PTY mode, sandboxed and not.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { RpcError } from '../../src/client/rpc-connection.ts';
import { BACKENDS } from '../support/backends.ts';
import { startServer, TestSession, type BackendKind, type TestServer } from '../support/harness.ts';

interface Case {
  readonly name: string;
  readonly argv: (workdir: string) => string[];
  readonly cwd?: (workdir: string) => string;
  readonly message: (workdir: string) => string;
  readonly errno: string;
}

const CASES: readonly Case[] = [
  {
    name: 'a cwd that is a file',
    argv: () => ['true'],
    cwd: (w) => `${w}/plain-file`,
    message: (w) => `cwd ${w}/plain-file: Not a directory`,
    errno: 'ENOTDIR',
  },
  {
    name: 'a cwd that does not exist',
    argv: () => ['true'],
    cwd: (w) => `${w}/no-such-dir`,
    message: (w) => `cwd ${w}/no-such-dir: No such file or directory`,
    errno: 'ENOENT',
  },
  {
    name: 'a program that does not exist',
    argv: () => ['no-such-program-here', 'arg'],
    message: () => 'no-such-program-here: No such file or directory',
    errno: 'ENOENT',
  },
  {
    name: 'a program that is not executable',
    argv: (w) => [`${w}/not-executable.sh`],
    message: (w) => `${w}/not-executable.sh: Permission denied`,
    errno: 'EACCES',
  },
];

const MODES = [
  { label: 'pipe', extra: {} },
  { label: 'PTY', extra: { tty: true } },
] as const;
const SANDBOXES = ['workspace-write', 'danger-full-access'] as const;

// Local with kept-warm sandboxes and with one bwrap per command; docker on both of its paths:
// the exec agent, and one engine exec per command.
interface Variant {
  readonly backend: BackendKind;
  readonly label: string;
  readonly flags: string[];
  readonly cold?: boolean;
}
const VARIANTS = BACKENDS.flatMap((backend): Variant[] =>
  backend === 'docker'
    ? [
        { backend, label: 'docker, exec agent', flags: ['--docker-exec-path', 'agent'] },
        { backend, label: 'docker, engine exec', flags: ['--docker-exec-path', 'exec'] },
      ]
    : [
        { backend, label: 'local, warm sandbox', flags: [] },
        { backend, label: 'local, one bwrap per command', flags: [], cold: true },
      ],
);

for (const { backend, label, flags, cold } of VARIANTS) {
  describe(`starts that cannot happen [${label}]`, { timeout: 120_000 }, () => {
    let server: TestServer;
    let s: TestSession;
    let workdir = '';

    test('setup', async () => {
      server = await startServer({ backend, flags, coldSandbox: cold === true });
      s = await TestSession.open(server.url, { session: { sandbox: { type: 'danger-full-access' } } });
      workdir = String((await s.request<Record<string, unknown>>('session/info', {}))['workdir']);
      const prep = await s.run('prep', [
        'sh',
        '-c',
        'echo x > plain-file && printf "#!/bin/sh\\necho hi\\n" > not-executable.sh && chmod 644 not-executable.sh',
      ]);
      assert.equal(prep.exited['exitCode'], 0, prep.stderr);
    });

    for (const [n, c] of CASES.entries()) {
      test(`${c.name}: process/start fails with EXEC_ERR_SPAWN_FAILED, in every mode`, async () => {
        for (const mode of MODES) {
          for (const sandbox of SANDBOXES) {
            const id = `fail-${n}-${mode.label}-${sandbox}`;
            const start = s.start(id, c.argv(workdir), {
              ...mode.extra,
              ...(c.cwd ? { cwd: c.cwd(workdir) } : {}),
              sandbox: { type: sandbox },
            });
            await assert.rejects(start, (err: unknown) => {
              assert.ok(err instanceof RpcError, String(err));
              assert.equal(err.code, 'EXEC_ERR_SPAWN_FAILED', `${mode.label}, ${sandbox}: ${err.message}`);
              assert.equal(err.rpcCode, -32603);
              assert.equal(err.message, c.message(workdir));
              assert.equal(err.data?.['errno'], c.errno);
              return true;
            });
            // Nothing was created: no exit was reported, and the id can be used at once.
            assert.equal(
              s.eventsOf(id).filter((e) => e.method === 'process/exited').length,
              0,
              `${mode.label}, ${sandbox}: an exit was reported`,
            );
            const ok = await s.run(id, ['sh', '-c', 'echo fine'], { ...mode.extra, sandbox: { type: sandbox } });
            assert.match(ok.stdout + ok.pty, /fine/);
          }
        }
      });
    }

    test('teardown', async () => {
      await s.close();
      await server.close();
    });
  });
}
