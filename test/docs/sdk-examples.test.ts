/**
 * Every ```ts example of docs/sdk.md is a program this test runs, as a user would (importing
 * `exec-server/client` through the package's own exports), against a real server; what it
 * prints must equal the ```text block under it. Examples marked `<!-- sdk-example: docker -->`
 * run against the docker backend (skipped without an engine, failing under CI=true).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { engineReady } from '../docker/engine.ts';
import { startServer, type TestServer } from '../support/harness.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface Example {
  readonly title: string;
  readonly code: string;
  readonly expected: string;
  readonly backend: 'local' | 'docker';
}

/** The examples of a Markdown text: a ```ts block, then a ```text block with its output. */
export function examples(markdown: string): Example[] {
  const out: Example[] = [];
  const re = /(?:^|\n)(<!-- sdk-example: (\w+) -->\n)?```ts\n([\s\S]*?)\n```\n+```text\n([\s\S]*?)```/g;
  let title = '';
  let last = 0;
  for (let m = re.exec(markdown); m; m = re.exec(markdown)) {
    const heading = [...markdown.slice(last, m.index).matchAll(/^## (.+)$/gm)].pop();
    if (heading) title = heading[1] ?? title;
    last = m.index + m[0].length;
    out.push({ title, code: m[3] ?? '', expected: m[4] ?? '', backend: m[2] === 'docker' ? 'docker' : 'local' });
  }
  return out;
}

function run(file: string, env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      // The `exec-server-source` condition: the exports' TypeScript sources, as in a checkout
      // without a build (an installed package resolves its build, test/cli/pack.test.ts).
      ['--conditions=exec-server-source', '--import', 'tsx', file],
      { cwd: ROOT, env: { ...process.env, ...env }, timeout: 120_000 },
      (err, stdout, stderr) => {
        resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
      },
    );
  });
}

test('docs/sdk.md: every ts block has its output block', async () => {
  const md = await readFile(join(ROOT, 'docs/sdk.md'), 'utf8');
  const found = examples(md);
  assert.equal(found.length, (md.match(/^```ts$/gm) ?? []).length, 'a ```ts block without a ```text block under it');
  assert.ok(found.length >= 8, `only ${found.length} examples`);
});

test('docs/sdk.md examples print what the page says', { timeout: 900_000 }, async (t) => {
  const md = await readFile(join(ROOT, 'docs/sdk.md'), 'utf8');
  // Inside the clone: `exec-server/client` resolves through package.json's exports.
  const dir = await mkdtemp(join(ROOT, '.sdk-examples-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const servers = new Map<string, TestServer>();
  t.after(async () => {
    for (const s of servers.values()) await s.close();
  });
  let n = 0;
  for (const ex of examples(md)) {
    const file = join(dir, `example-${++n}.ts`);
    await writeFile(file, ex.code);
    await t.test(
      `${n}. ${ex.title}`,
      ex.backend === 'docker' && !engineReady ? { skip: 'no Docker engine' } : {},
      async () => {
        let server = servers.get(ex.backend);
        if (server === undefined) {
          server = await startServer({ backend: ex.backend, flags: ['--token', 'doc-token'] });
          servers.set(ex.backend, server);
        }
        const r = await run(file, { EXEC_SERVER_URL: server.url, EXEC_SERVER_TOKEN: 'doc-token' });
        assert.equal(r.stderr, '', 'nothing on stderr');
        assert.equal(r.code, 0);
        assert.equal(r.stdout, ex.expected);
      },
    );
  }
});
