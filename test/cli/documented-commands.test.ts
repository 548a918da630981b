/**
 * Every command line README.md and docs/ show (in ```sh blocks and in inline code) works as
 * written from a clone. A command line is one that starts with `npm start`, `npx exec-server` or
 * (in a ```sh block) `exec-server`; usage synopses (with `[options]` or capitalised placeholders such as CMD, ID)
 * are not commands. Each one found must have an entry in RUNNERS below, which runs it. The only
 * changes made to a line: a server binds port 0 instead of 8765 (other servers may hold it),
 * `SESSION` is a session created for the test, on the local backend (no Docker engine)
 * `/workspace` is that session's workspace directory, and `audit.jsonl` is a log the test wrote.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { HttpFiles } from '../../src/client/files.ts';
import { engineReady } from '../docker/engine.ts';
import { freePort } from '../support/free-port.ts';
import { startServer, type TestServer } from '../support/harness.ts';
import { requireTmux, Tmux } from './tmux.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PREFIX = /^(npm ci && npm start|npm start|npx exec-server|exec-server)(\s|$)/;
/** In running text `exec-server cp` names a command; only the npm and npx forms are command lines there. */
const INLINE_PREFIX = /^(npm start|npx exec-server)(\s|$)/;
/** Synopsis markers: optional parts, or capitalised placeholder words (not `$VARIABLES`). */
const SYNOPSIS = /\[|(^|[\s:])(?<!\$)(ARGS|CMD|COMMAND|ID|PATH|LOCAL|SRC|DST|URL|PORT|VALUE|DIR)\b/;

/** Command lines in a Markdown text: lines of ```sh blocks and inline code spans. */
export function commandLines(markdown: string): string[] {
  const found: string[] = [];
  let inSh = false;
  for (const line of markdown.split('\n')) {
    if (/^```/.test(line)) {
      inSh = !inSh && /^```(sh|bash|console)?\s*$/.test(line);
      continue;
    }
    const candidates = inSh ? [line.replace(/\s+#\s.*$/, '')] : [...line.matchAll(/`([^`]+)`/g)].map((m) => m[1] ?? '');
    for (const c of candidates) {
      const cmd = c.trim();
      if ((inSh ? PREFIX : INLINE_PREFIX).test(cmd) && !SYNOPSIS.test(cmd)) found.push(cmd);
    }
  }
  return found;
}

async function documented(): Promise<Map<string, string>> {
  const files = [
    'README.md',
    ...(await readdir(join(ROOT, 'docs'))).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`),
  ];
  const out = new Map<string, string>();
  for (const f of files)
    for (const cmd of commandLines(await readFile(join(ROOT, f), 'utf8'))) if (!out.has(cmd)) out.set(cmd, f);
  return out;
}

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a documented line through a shell in the repository, as a user would type it. */
function sh(
  line: string,
  env: Record<string, string> = {},
  opts: { untilStdout?: RegExp; timeoutMs?: number } = {},
): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', line], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => {
      process.kill(-child.pid!, 'SIGKILL');
      reject(
        new Error(`${line}: still running after ${opts.timeoutMs ?? 90_000} ms\nstdout: ${stdout}\nstderr: ${stderr}`),
      );
    }, opts.timeoutMs ?? 90_000);
    child.stdout.on('data', (d) => {
      stdout += String(d);
      // A server: once it printed its address, it works; stop it the way an operator would.
      if (opts.untilStdout?.test(stdout)) process.kill(-child.pid!, 'SIGTERM');
    });
    child.stderr.on('data', (d) => (stderr += String(d)));
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

interface Context {
  readonly t: TestContext;
  readonly server: TestServer;
  /** Environment pointing client commands at the test server. */
  readonly env: Record<string, string>;
  readonly session: string;
  /** The session's workspace: `/workspace` on docker, a host directory on the local backend. */
  readonly workspace: string;
  readonly scratch: string;
}

/** `SESSION` is the test's session; `/workspace` its workspace (the same path on docker). */
function onTestServer(line: string, ctx: Context): string {
  return line.replace(/SESSION:\/workspace\//g, `${ctx.session}:${ctx.workspace}/`);
}

type Runner = (line: string, ctx: Context) => Promise<void>;

const WS_LINE = /ws:\/\/[^\s]+:\d+\n/;

/** A server command: bound to port 0, it prints its ws:// line and stops on SIGTERM. */
const server: Runner = async (line) => {
  const r = await sh(
    line.replace(/:8765\b/g, ':0'),
    { EXEC_SERVER_LISTEN: 'ws://127.0.0.1:0', TOKEN: 'documented-token' },
    { untilStdout: WS_LINE },
  );
  assert.match(r.stdout, WS_LINE, `${line}\n${r.stderr}`);
};

const RUNNERS: Record<string, Runner> = {
  'npm ci && npm start': async (_line, ctx) => server('npm start', ctx), // npm ci has run: this file is executing
  'npm start -- --backend docker': async (line, ctx) => {
    if (engineReady) return server(line, ctx);
    const r = await sh(line);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^exec-server: no Docker engine answers/);
  },
  // A fleet replica needs a fixed port (the others reach it there): a free one, not 0.
  'npm start -- --backend docker --fleet --instance-id dev': async (line) => {
    const listen = `ws://127.0.0.1:${await freePort()}`;
    const r = await sh(line, { EXEC_SERVER_LISTEN: listen }, engineReady ? { untilStdout: WS_LINE } : {});
    if (engineReady) assert.ok(r.stdout.endsWith(`${listen}\n`), `${r.stdout}\n${r.stderr}`);
    else assert.equal(r.code, 2);
  },
  'npx exec-server serve --listen ws://0.0.0.0:8765 --backend docker --token "$TOKEN"': async (line, ctx) => {
    if (engineReady) return server(line, ctx);
    const r = await sh(line, { TOKEN: 'documented-token' });
    assert.equal(r.code, 2);
  },
  'npm start -- --help': async (line) => {
    const r = await sh(line);
    assert.equal(r.code, 0);
    for (const sub of ['run', 'shell', 'sessions', 'cp']) assert.match(r.stdout, new RegExp(`exec-server ${sub}`));
    assert.match(r.stdout, /--listen/);
  },
  'npm start --silent': server,
  'npx exec-server --version': async (line) => {
    const r = await sh(line);
    assert.equal(r.code, 0);
    assert.match(r.stdout, /^exec-server \d+\.\d+\.\d+\n$/);
  },
  'npx exec-server run -- echo hello': async (line, { env }) => {
    const r = await sh(line, env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'hello\n');
  },
  'npx exec-server run --keep -- pwd': async (line, { env, server: srv }) => {
    const r = await sh(line, env, { timeoutMs: 60_000 });
    assert.equal(r.code, 0, r.stderr);
    const id = /session kept: (\S+)/.exec(r.stderr)?.[1];
    assert.ok(id, r.stderr);
    assert.equal(r.stdout, srv.backend.kind === 'docker' ? '/workspace\n' : `${srv.config.workspaceRoot}/${id}\n`);
    assert.equal((await fetch(`${srv.httpUrl}/v1/sessions/${id}`)).status, 200, 'the session is kept');
  },
  'npx exec-server sessions': async (line, { env, session }) => {
    const r = await sh(line, env);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(session));
  },
  'npx exec-server cp ./notes.txt SESSION:/workspace/': async (line, ctx) => {
    await writeFile(join(ctx.scratch, 'notes.txt'), 'documented notes\n');
    const r = await sh(`cd ${ctx.scratch} && ${onTestServer(line, ctx)}`, ctx.env);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /notes\.txt: 17 bytes/);
  },
  'npx exec-server cp SESSION:/workspace/notes.txt ./copy.txt': async (line, ctx) => {
    const files = new HttpFiles({ baseUrl: ctx.server.url, sessionId: ctx.session });
    await files.upload(`${ctx.workspace}/notes.txt`, Readable.from([Buffer.from('documented notes\n')]));
    const r = await sh(`cd ${ctx.scratch} && ${onTestServer(line, ctx)}`, ctx.env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(await readFile(join(ctx.scratch, 'copy.txt'), 'utf8'), 'documented notes\n');
  },
  'npx exec-server audit verify audit.jsonl': async (line, ctx) => {
    const audited = await startServer({ flags: ['--audit-log', join(ctx.scratch, 'audit.jsonl')] });
    await fetch(`${audited.httpUrl}/v1/sessions`, { method: 'POST' });
    await audited.close();
    // From the clone (npx resolves this checkout's exec-server there), the file named by its path.
    const r = await sh(line.replace('audit.jsonl', join(ctx.scratch, 'audit.jsonl')));
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^ok: \d+ lines, chain intact; head [0-9a-f]{64}\n$/);
  },
  'npx exec-server shell': async (line, { t, env }) => {
    if (!requireTmux(t)) return;
    const term = new Tmux({ ...env, PS1: '$ ' }, 100, 30);
    try {
      term.line(`cd ${ROOT}`);
      term.line(`${line}; echo "SHELL-EXIT=$?"`);
      await term.waitFor(/shell in session [0-9a-f-]{36}/, 60_000);
      term.line('echo "in-shell-$((6*7))"; tty');
      await term.waitFor(/in-shell-42/, 30_000);
      term.line('exit 3');
      await term.waitFor(/SHELL-EXIT=3/, 30_000);
    } finally {
      term.kill();
    }
  },
};

test('every command line in README.md and docs/ has a runner here', async () => {
  const lines = await documented();
  assert.ok(lines.size >= 8, `found only ${[...lines.keys()].join(' | ')}`);
  const missing = [...lines].filter(([cmd]) => RUNNERS[cmd] === undefined).map(([cmd, file]) => `${file}: ${cmd}`);
  assert.deepEqual(missing, [], 'documented command lines without a runner');
  assert.deepEqual(
    Object.keys(RUNNERS).filter((cmd) => !lines.has(cmd)),
    [],
    'runners of lines the docs no longer show',
  );
});

test('the synopsis filter leaves real command lines in, placeholders out', () => {
  const md = [
    '```sh',
    'npm start                # the server',
    'npx exec-server run -- CMD ARGS',
    '```',
    'Use `exec-server cp [--url URL] SRC DST` or `npx exec-server sessions`.',
  ].join('\n');
  assert.deepEqual(commandLines(md), ['npm start', 'npx exec-server sessions']);
});

test('each documented command line works as written', { timeout: 900_000 }, async (t) => {
  const lines = await documented();
  // Client commands run against docker when an engine answers (the paths docs show are the
  // container's), else against the local backend.
  const srv = await startServer({ backend: engineReady ? 'docker' : 'local' });
  t.after(() => srv.close());
  const created = await fetch(`${srv.httpUrl}/v1/sessions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  const info = (await created.json()) as { sessionId: string; workdir: string };
  // Inside the clone, so that `npx exec-server` run from it finds this package (outside a
  // package npx would look the name up in the registry).
  const scratch = await mkdtemp(join(ROOT, 'node_modules', '.exec-server-doc-'));
  t.after(() => rm(scratch, { recursive: true, force: true }));
  const ctx: Context = {
    t,
    server: srv,
    env: { EXEC_SERVER_URL: srv.url },
    session: info.sessionId,
    workspace: info.workdir,
    scratch,
  };
  for (const cmd of lines.keys()) {
    const runner = RUNNERS[cmd];
    if (runner === undefined) continue; // reported by the first test
    await t.test(cmd, async (st) => runner(cmd, { ...ctx, t: st }));
  }
});
