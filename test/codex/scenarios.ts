/**
 * The Codex CLI scenarios of codex-cli.test.ts: the targets, the scripted turns (every call the
 * model asks for), one `codex exec` run per target and work directory, and the parsing of what
 * Codex sent back to the model.
 */
import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  runCodexExec,
  startReferenceExecServer,
  type CodexExecResult,
  type CodexSandboxMode,
  type RunCodexExecOptions,
} from '../support/codex-cli.ts';
import { startServer, type BackendKind } from '../support/harness.ts';
import {
  applyPatch,
  assistantMessage,
  execCommand,
  sessionIdFromOutput,
  startScriptedModel,
  writeStdin,
  type ScriptedModel,
  type ScriptedTurn,
} from '../support/scripted-model.ts';

export type Target = BackendKind | 'reference';

export interface Endpoint {
  readonly url: string;
  /** Our server's HTTP base (metrics); undefined for the reference. */
  readonly httpUrl?: string;
  close(): Promise<void>;
}

export async function startTarget(target: Target, flags: readonly string[] = []): Promise<Endpoint> {
  if (target === 'reference') return startReferenceExecServer();
  return startServer({ backend: target, flags });
}

/**
 * `codex exec` against `endpoint`, its model answering from `model`; then the server's metrics
 * (undefined for the reference, which has none).
 */
export async function codexAgainst(
  endpoint: Endpoint,
  model: ScriptedModel,
  run: Omit<RunCodexExecOptions, 'execServerUrl' | 'modelUrl'>,
): Promise<{ result: CodexExecResult; metrics: string | undefined }> {
  const result = await runCodexExec({ execServerUrl: endpoint.url, modelUrl: model.url, ...run });
  const metrics = endpoint.httpUrl ? await (await fetch(`${endpoint.httpUrl}/metrics`)).text() : undefined;
  return { result, metrics };
}

/** A parsed unified-exec output text as Codex shows it to the model. */
export interface ToolOutput {
  readonly raw: string;
  /** `exited` with the code, or `running` with the session id. */
  readonly status:
    | { readonly kind: 'exited'; readonly code: number }
    | { readonly kind: 'running'; readonly sessionId: number }
    | { readonly kind: 'other' };
  /** The text after `Output:\n`, with this machine's environment noise removed (see NOISE). */
  readonly output: string;
}

/**
 * Lines that come from the machine, not from the server: `bash -lc` reads the login profile (on
 * this host it prints a pyenv warning, on both servers alike), and the busybox test image has no
 * C.UTF-8 locale, so bash warns about the `LC_ALL` Codex sets.
 */
const NOISE = [/^pyenv: .*\r?\n/gm, /^\/bin\/bash: warning: setlocale: .*\r?\n/gm];

export function parse(raw: string | undefined): ToolOutput {
  assert.ok(raw !== undefined, 'Codex sent no function_call_output for this call');
  const exited = /Process exited with code (-?\d+)/.exec(raw);
  const running = sessionIdFromOutput(raw);
  const status =
    exited?.[1] !== undefined
      ? ({ kind: 'exited', code: Number(exited[1]) } as const)
      : running !== undefined
        ? ({ kind: 'running', sessionId: running } as const)
        : ({ kind: 'other' } as const);
  const at = raw.indexOf('Output:\n');
  let output = at === -1 ? raw : raw.slice(at + 'Output:\n'.length);
  for (const n of NOISE) output = output.replace(n, '');
  return { raw, status, output };
}

export const exitedWith = (code: number) => ({ kind: 'exited', code }) as const;

/** A directory the sandbox must not let a command write to, as the command sees it. */
export async function outsideDir(target: Target): Promise<string> {
  // Inside a container, /root belongs to root and the sandbox user cannot write there.
  if (target === 'docker') return '/root';
  // On this host: outside the client cwd and outside /tmp (both writable under workspace-write),
  // and writable by anyone, so that only the sandbox's read-only mount stops the write (a root
  // server's sandboxed commands run as users of their own, which could not even search /root).
  const dir = join('/var/tmp', 'exec-server-codex-tests', `outside-${process.pid}-${target}`);
  await mkdir(dir, { recursive: true });
  await chmod(dir, 0o777);
  return dir;
}

export interface ScenarioRun {
  readonly target: Target;
  readonly cwd: string;
  readonly outside: string;
  readonly result: CodexExecResult;
  readonly out: Record<string, ToolOutput>;
  readonly metrics?: string;
  /** Whether the denied write reached the outside file (read on the host; docker: via the next command). */
  readonly outsideWritten: boolean;
  /** Who owns the work directory once the server is gone (the local backend lends it while in use). */
  readonly ownerAfter: number | undefined;
}

export const CALLS = [
  'echo',
  'poll1',
  'poll2',
  'tty1',
  'tty2',
  'write',
  'read',
  'patch',
  'patched',
  'deny',
  'count',
] as const;

/** What the `patch` call adds: a file written through the server's file API, read by the next command. */
export const PATCH = '*** Begin Patch\n*** Add File: patched-by-codex.txt\n+patched-line\n*** End Patch\n';

export function scenarioTurns(cwd: string, outsideFile: string): ScriptedTurn[] {
  return [
    // exec_command echo, as the model usually asks: a login shell (`bash -lc`).
    execCommand('echo', { cmd: 'echo hello' }),
    // A live process: the first answer has a session id, the poll gets the end.
    execCommand('poll1', { cmd: 'sleep 1; echo done', yield_time_ms: 250, login: false }),
    ({ outputFor }) => writeStdin('poll2', { session_id: sessionIdFromOutput(outputFor('poll1')) ?? -1, chars: '' }),
    // A PTY session that waits for a line, then gets it through write_stdin.
    execCommand('tty1', { cmd: 'stty size; read -r x; echo "got:$x"', tty: true, yield_time_ms: 500, login: false }),
    ({ outputFor }) => writeStdin('tty2', { session_id: sessionIdFromOutput(outputFor('tty1')) ?? -1, chars: 'abc\n' }),
    // Files: written by one command, read by the next (relative, then by the client's absolute path).
    execCommand('write', { cmd: 'echo payload-123 > note.txt && echo wrote', login: false }),
    execCommand('read', { cmd: `cat note.txt && cat '${cwd}/note.txt' && pwd`, login: false }),
    // apply_patch writes through the file API; the next command must see (and may change) the file.
    applyPatch('patch', PATCH),
    execCommand('patched', {
      cmd: `cat patched-by-codex.txt && echo appended >> '${cwd}/patched-by-codex.txt' && cat patched-by-codex.txt`,
      login: false,
    }),
    // A denied write outside the workspace; each attempt leaves a line in attempts.log.
    execCommand('deny', { cmd: `echo try >> attempts.log; echo x > '${outsideFile}'`, login: false }),
    execCommand('count', {
      cmd: `wc -l < attempts.log; test -e '${outsideFile}' && echo outside-written || echo outside-absent`,
      login: false,
    }),
    assistantMessage('done'),
  ];
}

/**
 * Where the client's work directory is: under /tmp (made by mkdtemp, as agent harnesses do; the
 * local sandbox's private /tmp must not hide it), or elsewhere (outside every default writable root).
 */
export type WorkPlace = 'tmp' | 'elsewhere';
export const WORK_PLACES: readonly WorkPlace[] = ['tmp', 'elsewhere'];
export const ELSEWHERE = join('/var/tmp', 'exec-server-codex-tests');

export async function workDir(where: WorkPlace, target: Target): Promise<string> {
  if (where === 'tmp') return mkdtemp(join(tmpdir(), `codex-${target}-`));
  await mkdir(ELSEWHERE, { recursive: true });
  return mkdtemp(join(ELSEWHERE, `work-${target}-`));
}

export async function runScenarios(target: Target, where: WorkPlace): Promise<ScenarioRun> {
  const sandbox: CodexSandboxMode = 'workspace-write';
  const endpoint = await startTarget(target);
  const cwd = await workDir(where, target);
  const outside = await outsideDir(target);
  const outsideFile = join(outside, `codex-denied-${process.pid}.txt`);
  const model = await startScriptedModel(scenarioTurns(cwd, outsideFile));
  try {
    const { result, metrics } = await codexAgainst(endpoint, model, {
      cwd,
      prompt: 'run the scenarios',
      sandbox,
      timeoutMs: 90_000,
    });
    const out: Record<string, ToolOutput> = {};
    for (const c of CALLS) {
      const raw = model.outputFor(c);
      if (raw !== undefined) out[c] = parse(raw);
    }
    const outsideWritten =
      target === 'docker'
        ? (out['count']?.output.includes('outside-written') ?? false)
        : await readFile(outsideFile).then(
            () => true,
            () => false,
          );
    await endpoint.close();
    const ownerAfter = (await stat(join(cwd, 'patched-by-codex.txt')).catch(() => undefined))?.uid;
    return {
      target,
      cwd,
      outside,
      result,
      out,
      outsideWritten,
      ownerAfter,
      ...(metrics !== undefined ? { metrics } : {}),
    };
  } finally {
    await model.close();
    await endpoint.close().catch(() => undefined);
    if (target !== 'docker') await rm(outsideFile, { force: true });
  }
}

/** The value of one Prometheus counter line (0 when absent). */
export function counter(metrics: string | undefined, name: string, labels: string): number {
  const line = metrics?.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}
