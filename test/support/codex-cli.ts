/**
 * Drives the real Codex CLI (npm package `@openai/codex`) in tests.
 *
 * - {@link runCodexExec} runs `codex exec` against an exec-server (`CODEX_EXEC_SERVER_URL`) with an
 *   isolated `CODEX_HOME` whose `config.toml` points the model provider at a local scripted model,
 *   so nothing ever reaches the internet.
 * - {@link startReferenceExecServer} starts the reference `codex exec-server` for side-by-side tests.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

/** Sandbox mode passed to `codex exec --sandbox`. */
export type CodexSandboxMode = 'read-only' | 'workspace-write' | 'danger-full-access';

/** Options for {@link runCodexExec}. */
export interface RunCodexExecOptions {
  /** `ws://` URL of the exec-server; exported to Codex as `CODEX_EXEC_SERVER_URL`. */
  execServerUrl: string;
  /** Base URL of the (scripted) Responses API, e.g. `ScriptedModel.url` (`http://127.0.0.1:N/v1`). */
  modelUrl: string;
  /** Working directory of the Codex process; Codex sends it as `cwd` to the exec-server. */
  cwd: string;
  /** The user prompt (the scripted model ignores it). */
  prompt: string;
  /**
   * Sandbox mode (`--sandbox`). Default: none given, i.e. Codex's default for `exec`
   * (read-only). Ignored when `bypassSandbox` is set.
   */
  sandbox?: CodexSandboxMode;
  /** Pass `--dangerously-bypass-approvals-and-sandbox` instead of `--sandbox`. */
  bypassSandbox?: boolean;
  /**
   * Extra `config.toml` text appended verbatim after the generated config (top-level keys must
   * therefore come before any table in your snippet; prefer `configOverrides` for single keys).
   */
  extraConfig?: string;
  /** Extra `-c key=value` overrides (value is TOML, e.g. `'"never"'` or `'true'`). */
  configOverrides?: Record<string, string>;
  /** Extra command-line arguments inserted before the prompt. */
  extraArgs?: readonly string[];
  /** Extra environment variables for the Codex process. */
  env?: Record<string, string | undefined>;
  /** Kill Codex (SIGKILL after SIGTERM) after this many ms. Default 60 000. */
  timeoutMs?: number;
  /** Keep the temporary CODEX_HOME (for debugging); its path is returned either way. */
  keepCodexHome?: boolean;
  /** Model id written to the config. Default {@link SCRIPTED_MODEL_ID}. */
  model?: string;
}

/** Result of {@link runCodexExec}. */
export interface CodexExecResult {
  /** Exit code, or `null` if killed by a signal. */
  code: number | null;
  /** Signal that ended the process, if any. */
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** True if the run hit `timeoutMs` and was killed. */
  timedOut: boolean;
  /** Wall-clock duration of the run in ms. */
  durationMs: number;
  /** The temporary CODEX_HOME used (deleted unless `keepCodexHome`). */
  codexHome: string;
}

/** A running reference exec-server. */
export interface ReferenceExecServer {
  /** The `ws://127.0.0.1:PORT` URL it printed. */
  url: string;
  /** The child process (for logs or signals). */
  child: ChildProcess;
  /** Everything written to stderr so far. */
  stderr(): string;
  /** Sends SIGTERM (SIGKILL after 3 s) and waits for exit; removes its temporary CODEX_HOME. */
  close(): Promise<void>;
}

/**
 * The model id written to the generated config. Any string works with a custom provider; an id
 * without bundled metadata only adds a "Model metadata ... not found" warning to stderr.
 */
export const SCRIPTED_MODEL_ID = 'gpt-5.5';
/** The provider id written to the generated config. */
export const SCRIPTED_PROVIDER_ID = 'scripted';

/**
 * Resolves the `@openai/codex` launcher script (`bin/codex.js`).
 *
 * Looks next to this file first, then from the current working directory. Set `CODEX_JS` to
 * override with an explicit path to `bin/codex.js`.
 */
export function resolveCodexLauncher(): string {
  const override = process.env['CODEX_JS'];
  if (override !== undefined && override !== '') return override;
  const bases = [import.meta.url, join(process.cwd(), 'package.json')];
  const errors: string[] = [];
  for (const base of bases) {
    try {
      const pkgJsonPath = createRequire(base).resolve('@openai/codex/package.json');
      const pkg = JSON.parse(readFileSync(pkgJsonPath, 'utf8')) as { bin?: string | Record<string, string> };
      const rel = typeof pkg.bin === 'string' ? pkg.bin : pkg.bin?.['codex'];
      if (rel === undefined) throw new Error(`no "codex" bin in ${pkgJsonPath}`);
      const launcher = join(dirname(pkgJsonPath), rel);
      if (existsSync(launcher)) return launcher;
      errors.push(`${launcher} missing`);
    } catch (err) {
      errors.push(err instanceof Error ? err.message : String(err));
    }
  }
  throw new Error(`cannot find @openai/codex (install it as a devDependency): ${errors.join('; ')}`);
}

/**
 * The `config.toml` that makes Codex use `modelUrl` as a keyless Responses API provider,
 * with retries, update checks and telemetry off.
 */
export function scriptedModelConfigToml(modelUrl: string, model: string = SCRIPTED_MODEL_ID): string {
  return [
    `model = ${JSON.stringify(model)}`,
    `model_provider = ${JSON.stringify(SCRIPTED_PROVIDER_ID)}`,
    `approval_policy = "never"`,
    `check_for_update_on_startup = false`,
    ``,
    `[model_providers.${SCRIPTED_PROVIDER_ID}]`,
    `name = "Scripted test model"`,
    `base_url = ${JSON.stringify(modelUrl)}`,
    `wire_api = "responses"`,
    `requires_openai_auth = false`,
    `request_max_retries = 0`,
    `stream_max_retries = 0`,
    `stream_idle_timeout_ms = 30000`,
    ``,
    `[analytics]`,
    `enabled = false`,
    ``,
    // Without these, startup tries github.com (curated plugin sync, via a local `git ls-remote`),
    // api.github.com and chatgpt.com.
    `[features]`,
    `plugins = false`,
    `remote_plugin = false`,
    `apps = false`,
    ``,
  ].join('\n');
}

/** Environment variables removed from Codex's environment so a developer's setup cannot leak in. */
const SCRUBBED_ENV = [
  'CODEX_HOME',
  'CODEX_EXEC_SERVER_URL',
  'CODEX_EXEC_SERVER_CONNECTION_TOKEN',
  'OPENAI_API_KEY',
  'OPENAI_BASE_URL',
  'CODEX_API_KEY',
  'CODEX_ACCESS_TOKEN',
  'CODEX_MANAGED_BY_NPM',
  'CODEX_MANAGED_PACKAGE_ROOT',
  'RUST_LOG',
];

function baseEnv(extra: Record<string, string | undefined> | undefined): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of SCRUBBED_ENV) delete env[k];
  // Loopback traffic must not go through a proxy.
  env['NO_PROXY'] = ['127.0.0.1', 'localhost', env['NO_PROXY']].filter(Boolean).join(',');
  env['no_proxy'] = env['NO_PROXY'];
  for (const [k, v] of Object.entries(extra ?? {})) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  return env;
}

/**
 * Parent directory for temporary CODEX_HOME directories. It must NOT be under the system temp
 * dir: Codex then refuses to create its `codex-linux-sandbox` helper alias, and every sandboxed
 * command of the reference exec-server fails with `bwrap: execvp codex-linux-sandbox: No such
 * file or directory`. Override with `CODEX_TEST_HOME_BASE`.
 */
export function codexHomeBase(): string {
  const override = process.env['CODEX_TEST_HOME_BASE'];
  return override !== undefined && override !== '' ? override : join(homedir(), '.cache', 'exec-server-codex-tests');
}

async function makeCodexHome(prefix: string): Promise<string> {
  const base = codexHomeBase();
  await mkdir(base, { recursive: true });
  return mkdtemp(join(base, prefix));
}

/** Signals the whole process group of a detached child (the npm launcher and the native binary). */
function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    child.kill(signal);
  }
}

function waitForExit(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  }
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
}

/**
 * Runs `codex exec --skip-git-repo-check --color never [--sandbox MODE] PROMPT` in `cwd` with
 * `CODEX_EXEC_SERVER_URL` set, an isolated temporary `CODEX_HOME`, and the generated config
 * (see {@link scriptedModelConfigToml}). Never rejects because of Codex's exit status.
 */
export async function runCodexExec(opts: RunCodexExecOptions): Promise<CodexExecResult> {
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const codexHome = await makeCodexHome('exec-');
  await writeFile(
    join(codexHome, 'config.toml'),
    scriptedModelConfigToml(opts.modelUrl, opts.model) + (opts.extraConfig ?? ''),
  );

  const args = [resolveCodexLauncher(), 'exec', '--skip-git-repo-check', '--color', 'never'];
  if (opts.bypassSandbox === true) args.push('--dangerously-bypass-approvals-and-sandbox');
  else if (opts.sandbox !== undefined) args.push('--sandbox', opts.sandbox);
  for (const [k, v] of Object.entries(opts.configOverrides ?? {})) args.push('-c', `${k}=${v}`);
  args.push(...(opts.extraArgs ?? []), '--', opts.prompt);

  const env = baseEnv({ CODEX_HOME: codexHome, CODEX_EXEC_SERVER_URL: opts.execServerUrl, ...opts.env });
  const started = Date.now();
  const child = spawn(process.execPath, args, {
    cwd: opts.cwd,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));

  let timedOut = false;
  let killTimer: NodeJS.Timeout | undefined;
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup(child, 'SIGTERM');
    killTimer = setTimeout(() => killGroup(child, 'SIGKILL'), 3_000);
  }, timeoutMs);
  const spawnError = new Promise<never>((_, reject) => child.once('error', reject));
  try {
    const { code, signal } = await Promise.race([waitForExit(child), spawnError]);
    return { code, signal, stdout, stderr, timedOut, durationMs: Date.now() - started, codexHome };
  } finally {
    clearTimeout(timer);
    if (killTimer !== undefined) clearTimeout(killTimer);
    if (opts.keepCodexHome !== true) await rm(codexHome, { recursive: true, force: true });
  }
}

/** Options for {@link startReferenceExecServer}. */
export interface ReferenceExecServerOptions {
  /** Working directory of the server process. */
  cwd?: string;
  /** Extra command-line arguments after `exec-server --listen ws://127.0.0.1:0`. */
  extraArgs?: readonly string[];
  /** Extra environment variables. */
  env?: Record<string, string | undefined>;
  /** Reject if no `ws://` line appears within this many ms. Default 15 000. */
  startTimeoutMs?: number;
}

/**
 * Spawns the reference `codex exec-server --listen ws://127.0.0.1:0` (with its own temporary
 * `CODEX_HOME`) and resolves with the `ws://` URL it prints on stdout.
 */
export async function startReferenceExecServer(opts: ReferenceExecServerOptions = {}): Promise<ReferenceExecServer> {
  const codexHome = await makeCodexHome('es-');
  // (`--exit-on-stdin-close` would be nice but is only accepted together with `--remote`.)
  const args = [resolveCodexLauncher(), 'exec-server', '--listen', 'ws://127.0.0.1:0', ...(opts.extraArgs ?? [])];
  const child = spawn(process.execPath, args, {
    cwd: opts.cwd ?? process.cwd(),
    env: baseEnv({ CODEX_HOME: codexHome, ...opts.env }),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));

  const cleanup = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      killGroup(child, 'SIGTERM');
      const t = setTimeout(() => killGroup(child, 'SIGKILL'), 3_000);
      await waitForExit(child);
      clearTimeout(t);
    }
    await rm(codexHome, { recursive: true, force: true });
  };

  const startTimeoutMs = opts.startTimeoutMs ?? 15_000;
  let url: string;
  try {
    url = await new Promise<string>((resolve, reject) => {
      let buf = '';
      const timer = setTimeout(
        () => reject(new Error(`exec-server printed no ws:// URL in ${startTimeoutMs} ms; stderr: ${stderr}`)),
        startTimeoutMs,
      );
      child.stdout.setEncoding('utf8').on('data', (s: string) => {
        buf += s;
        const m = /^(ws:\/\/\S+)\s*$/m.exec(buf);
        if (m?.[1] !== undefined) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      child.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(
          new Error(`exec-server exited early (code ${String(code)}, signal ${String(signal)}); stderr: ${stderr}`),
        );
      });
    });
  } catch (err) {
    await cleanup();
    throw err;
  }
  // Keep draining stdout so the child never blocks on a full pipe.
  child.stdout.resume();

  return { url, child, stderr: () => stderr, close: cleanup };
}
