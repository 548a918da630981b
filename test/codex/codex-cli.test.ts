/**
 * The real Codex CLI (`@openai/codex`, pinned in package.json) as a client of our server, side by
 * side with the reference `codex exec-server` from the same package.
 *
 * `codex exec` runs with `CODEX_EXEC_SERVER_URL` pointing at the server under test and a scripted
 * Responses-API model (test/support/scripted-model.ts) that asks for tool calls; the assertions
 * are on the `function_call_output` texts Codex sends back to the model. One Codex run per target
 * and work directory plays every scenario (echo, write_stdin polling a live process, a PTY with a
 * write, files written by one command and read by the next, apply_patch followed by a command
 * that reads and appends to the file, a denied write that must run exactly once), so the whole
 * file stays within a few seconds per run. Each target runs from a work directory made by mkdtemp
 * under /tmp (as agent harnesses do) and from one outside /tmp (scenarios.ts).
 *
 * Targets: our server on the local backend (bubblewrap), on the docker backend (a container per
 * session; the client's cwd does not exist there and becomes a workspace alias), and the
 * reference. Where we differ from the reference, the test asserts both values explicitly.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { dockerTestOptions, engineReady } from '../docker/engine.ts';
import type { CodexSandboxMode } from '../support/codex-cli.ts';
import { startServer, TestSession } from '../support/harness.ts';
import { assistantMessage, execCommand, startScriptedModel } from '../support/scripted-model.ts';
import {
  CALLS,
  codexAgainst,
  counter,
  exitedWith,
  outsideDir,
  parse,
  runScenarios,
  startTarget,
  WORK_PLACES,
  type ScenarioRun,
  type Target,
  type ToolOutput,
  type WorkPlace,
} from './scenarios.ts';

const TARGETS: Target[] = ['local', ...(engineReady ? (['docker'] as const) : []), 'reference'];
const runs = new Map<`${Target}@${WorkPlace}`, ScenarioRun>();
const cleanups: string[] = [];

function get(target: Target, where: WorkPlace): ScenarioRun {
  const run = runs.get(`${target}@${where}`);
  assert.ok(run, `no scenario run for ${target} from a work dir ${where}`);
  return run;
}

/** What Codex reported for one call of one target. */
function o(target: Target, where: WorkPlace, call: (typeof CALLS)[number]): ToolOutput {
  const run = get(target, where);
  const out = run.out[call];
  assert.ok(
    out,
    `${target}@${where}: Codex sent no output for ${call}; stderr tail: ${run.result.stderr.slice(-2000)}`,
  );
  return out;
}

after(async () => {
  for (const dir of cleanups) await rm(dir, { recursive: true, force: true });
});

for (const where of WORK_PLACES) {
  describe(`codex exec from a work dir ${where === 'tmp' ? 'under /tmp' : 'outside /tmp'}: ours and the reference side by side`, {
    timeout: 240_000,
  }, () => {
    before(async () => {
      for (const target of TARGETS) {
        const run = await runScenarios(target, where);
        runs.set(`${target}@${where}`, run);
        cleanups.push(run.cwd);
        if (target !== 'docker') cleanups.push(run.outside);
      }
    });

    for (const target of TARGETS) scenarioTests(target, where);

    describe('ours vs reference', () => {
      for (const ours of TARGETS.filter((t) => t !== 'reference')) {
        const opts = ours === 'docker' ? dockerTestOptions : {};
        test(`${ours}: the same status and output as the reference for every call but the denial text`, opts, () => {
          for (const call of CALLS) {
            const a = o(ours, where, call);
            const b = o('reference', where, call);
            assert.equal(a.status.kind, b.status.kind, `${call}: status kind`);
            if (a.status.kind === 'exited' && b.status.kind === 'exited')
              assert.equal(a.status.code, b.status.code, `${call}: exit code`);
            if (call === 'deny' || call === 'read') continue; // paths differ (per-target dirs); asserted above
            assert.equal(a.output, b.output, `${call}: output`);
          }
          const denyOurs = o(ours, where, 'deny').output;
          const denyRef = o('reference', where, 'deny').output;
          assert.match(denyRef, /Read-only file system\n$/);
          if (ours === 'docker') assert.match(denyOurs, /Permission denied\n$/);
          else assert.match(denyOurs, /Read-only file system\n$/);
        });
      }
    });
  });
}

/** The assertions on one target's run from one work directory. */
function scenarioTests(target: Target, where: WorkPlace): void {
  const opts = target === 'docker' ? dockerTestOptions : {};
  const out = (call: (typeof CALLS)[number]): ToolOutput => o(target, where, call);
  describe(target, () => {
    test('codex exec finishes normally and every scripted call got an answer', opts, () => {
      const run = get(target, where);
      assert.equal(run.result.timedOut, false);
      assert.equal(run.result.code, 0, run.result.stderr.slice(-3000));
      assert.equal(run.result.stdout.trim(), 'done');
      assert.doesNotMatch(run.result.stderr, /No usable execution environment/);
      assert.deepEqual(Object.keys(run.out).sort(), [...CALLS].sort());
    });

    test('exec_command echo: exit 0 and the text', opts, () => {
      const echo = out('echo');
      assert.deepEqual(echo.status, exitedWith(0), echo.output);
      // Docker too: the sandboxed user gets its own readable HOME, so `bash -lc` starts cleanly.
      assert.equal(echo.output, 'hello\n');
    });

    test('write_stdin polls a live process to its end', opts, () => {
      const first = out('poll1');
      assert.equal(first.status.kind, 'running', first.raw);
      assert.equal(first.output, '');
      const poll = out('poll2');
      assert.deepEqual(poll.status, exitedWith(0), poll.raw);
      assert.equal(poll.output, 'done\n');
    });

    test('PTY session: 24x80, the write is echoed by the terminal and read by the command', opts, () => {
      const first = out('tty1');
      assert.equal(first.status.kind, 'running', first.raw);
      assert.equal(first.output, '24 80\r\n');
      const second = out('tty2');
      assert.deepEqual(second.status, exitedWith(0), second.raw);
      assert.equal(second.output, 'abc\r\ngot:abc\r\n');
    });

    test('a file written by one command is read by the next, also by the client absolute path', opts, () => {
      assert.deepEqual(out('write').status, exitedWith(0));
      assert.equal(out('write').output, 'wrote\n');
      const read = out('read');
      assert.deepEqual(read.status, exitedWith(0), read.raw);
      // `pwd` is the client's directory on every target (docker: a symlink to the workspace).
      assert.equal(read.output, `payload-123\npayload-123\n${get(target, where).cwd}\n`);
    });

    test('apply_patch adds a file that the next command reads and appends to', opts, () => {
      assert.match(out('patch').raw, /Success\. Updated the following files:\s+A patched-by-codex\.txt/);
      const patched = out('patched');
      assert.deepEqual(patched.status, exitedWith(0), patched.raw);
      assert.equal(patched.output, 'patched-line\npatched-line\nappended\n');
      // Local: the work directory was lent to the session's sandbox user, and given back at the end.
      if (target === 'local') assert.equal(get(target, where).ownerAfter, process.getuid?.());
    });

    test('a write outside the workspace is denied, ran exactly once, and left nothing', opts, () => {
      const deny = out('deny');
      assert.deepEqual(deny.status, exitedWith(1), deny.raw);
      const file = join(get(target, where).outside, `codex-denied-${process.pid}.txt`);
      // The two sandboxes say it differently: bubblewrap (ours local, and the reference) mounts
      // the rest of the filesystem read-only; docker's container-user is an unprivileged uid.
      const why = target === 'docker' ? 'Permission denied' : 'Read-only file system';
      assert.equal(deny.output, `/bin/bash: line 1: ${file}: ${why}\n`);
      assert.equal(out('count').output, '1\noutside-absent\n');
      assert.equal(get(target, where).outsideWritten, false);
    });

    if (target !== 'reference') {
      test('the server reported the denial to Codex and did not retry (denialHandling: report)', opts, () => {
        const m = get(target, where).metrics;
        assert.equal(counter(m, 'exec_server_policy_decisions_total', 'outcome="denied-reported"'), 1, m);
        assert.equal(counter(m, 'exec_server_policy_decisions_total', 'outcome="denied-retried"'), 0);
        assert.equal(counter(m, 'exec_server_approvals_total', 'purpose='), 0);
      });
    }
  });
}

describe('gate interplay with a Codex client', { timeout: 120_000 }, () => {
  /** One denied write with `codex exec --dangerously-bypass-approvals-and-sandbox` (`sandbox: null` on the wire). */
  async function bypassRun(
    target: Target,
    flags: readonly string[] = [],
    mode: 'bypass' | CodexSandboxMode = 'bypass',
  ) {
    const endpoint = await startTarget(target, flags);
    const cwd = await mkdtemp(join(tmpdir(), `codex-gate-${target}-`));
    const outside = await outsideDir(target);
    const file = join(outside, `codex-gate-${process.pid}-${Math.random().toString(16).slice(2, 8)}.txt`);
    const model = await startScriptedModel([
      execCommand('w', { cmd: `echo try >> attempts.log; echo x > '${file}' && echo written`, login: false }),
      execCommand('n', { cmd: `wc -l < attempts.log; test -e '${file}' && echo present || echo absent`, login: false }),
      assistantMessage('done'),
    ]);
    try {
      const { result, metrics } = await codexAgainst(endpoint, model, {
        cwd,
        prompt: 'write',
        ...(mode === 'bypass' ? { bypassSandbox: true } : { sandbox: mode }),
        timeoutMs: 60_000,
      });
      assert.equal(result.code, 0, result.stderr.slice(-2000));
      return { w: parse(model.outputFor('w')), n: parse(model.outputFor('n')), metrics };
    } finally {
      await model.close();
      await endpoint.close();
      await rm(cwd, { recursive: true, force: true });
      if (target !== 'docker') await rm(outside, { recursive: true, force: true });
    }
  }

  test("reference: Codex's full-access mode (sandbox: null) writes outside the workspace", async () => {
    const r = await bypassRun('reference');
    assert.deepEqual(r.w.status, exitedWith(0));
    assert.equal(r.w.output, 'written\n');
    assert.equal(r.n.output, '1\npresent\n');
  });

  for (const target of ['local', 'docker'] as const) {
    test(
      `${target}: sandbox: null cannot widen a workspace-write session; the write is denied once`,
      target === 'docker' ? dockerTestOptions : {},
      async () => {
        const r = await bypassRun(target);
        assert.deepEqual(r.w.status, exitedWith(1), r.w.raw);
        assert.match(r.w.output, target === 'docker' ? /Permission denied\n$/ : /Read-only file system\n$/);
        assert.equal(r.n.output, '1\nabsent\n');
        assert.equal(counter(r.metrics, 'exec_server_policy_decisions_total', 'outcome="denied-reported"'), 1);
      },
    );
  }

  test('local, --denial-handling server: the server gate asks Codex, gets no approval, reports; one attempt', async () => {
    const r = await bypassRun(
      'local',
      ['--denial-handling', 'server', '--approval-policy', 'on-failure', '--approval-timeout-ms', '5000'],
      'workspace-write',
    );
    assert.deepEqual(r.w.status, exitedWith(1), r.w.raw);
    assert.match(r.w.output, /Read-only file system\n$/);
    assert.equal(r.n.output, '1\nabsent\n');
    // Codex does not implement approval/request: the request fails, which counts as denied.
    assert.equal(counter(r.metrics, 'exec_server_approvals_total', 'decision="denied"'), 1, r.metrics);
    assert.equal(counter(r.metrics, 'exec_server_policy_decisions_total', 'outcome="denied-reported"'), 1);
    assert.equal(counter(r.metrics, 'exec_server_policy_decisions_total', 'outcome="denied-retried"'), 0);
  });
});

describe('docker: the client working directory is one workspace for fs calls and commands', {
  timeout: 120_000,
}, () => {
  test('environmentConfig/read registers the alias; fs and commands agree on it', dockerTestOptions, async () => {
    const server = await startServer({ backend: 'docker' });
    const s = await TestSession.open(server.url, { clientName: 'codex-environment' });
    try {
      const cwd = `/tmp/client-${process.pid}/project`;
      const uri = `file://${cwd}`;
      // Before any alias: the client path does not exist in the container.
      await assert.rejects(
        s.request('fs/getMetadata', { path: `${uri}/.git`, sandbox: null }),
        (e: { rpcCode?: number }) => e.rpcCode === -32004,
      );
      await s.request('environmentConfig/read', {
        cwd: uri,
        configPaths: [['mcp_servers']],
        requirementsPaths: [['mcp_servers']],
      });
      // A file written through fs/writeFile under the client path is seen by a command there...
      await s.request('fs/writeFile', {
        path: `${uri}/from-fs.txt`,
        dataBase64: Buffer.from('via-fs\n').toString('base64'),
        sandbox: null,
      });
      const r = await s.run(
        'p1',
        ['/bin/bash', '-c', 'cat from-fs.txt; pwd; echo via-cmd > from-cmd.txt; cat /workspace/from-fs.txt'],
        { cwd: uri },
      );
      assert.equal(r.stdout, `via-fs\n${cwd}\nvia-fs\n`);
      assert.equal(r.exited['exitCode'], 0);
      // ... and a command's file is seen by fs calls under the client path.
      const meta = await s.request('fs/getMetadata', { path: `${uri}/from-cmd.txt`, sandbox: null });
      assert.equal(meta['isFile'], true);
      const read = await s.request<{ dataBase64: string }>('fs/readFile', {
        path: `${uri}/from-cmd.txt`,
        sandbox: null,
      });
      assert.equal(Buffer.from(read.dataBase64, 'base64').toString(), 'via-cmd\n');
      // Absolute paths under the client directory work inside commands too (the container has a symlink there).
      const abs = await s.run('p2', ['/bin/sh', '-c', `cat ${cwd}/from-cmd.txt; readlink ${cwd}`]);
      assert.equal(abs.stdout, 'via-cmd\n/workspace\n');
    } finally {
      await s.close();
      await server.close();
    }
  });
});

// CODEX_TEST_DUMP=<file>: write every tool output Codex sent back, per target, for inspection.
after(async () => {
  const dump = process.env['CODEX_TEST_DUMP'];
  if (dump) await writeFile(dump, JSON.stringify(Object.fromEntries([...runs].map(([k, v]) => [k, v.out])), null, 2));
});
