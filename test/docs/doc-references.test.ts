/**
 * What the docs and the code's comments point at exists: the repository paths the docs name,
 * the modules they name by a shorter path (`container/warm-pool.ts`), the paths comments in
 * `src/` name, and every cited section (`docs/x.md, "Section"`) of a doc. A section is cited by
 * its heading or the heading's beginning ("Egress" for "Egress (`network`)"), or by a bold
 * run-in heading (`**Quotas across the fleet.**`).
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** Top-level folders whose paths the docs name. */
const TREES = ['bench', 'bin', 'clients', 'docker', 'docs', 'helm', 'native', 'scripts', 'src', 'test', 'web'];
/** Paths the docs name as examples, not as files of this repository. */
const EXAMPLES = new Set([
  // a Codex `project_roots` subpath (docs/protocol.md)
  'src/gen',
]);
const ROOTED = /(?<![\w./-])((?:bench|bin|clients|docs|helm|native|scripts|src|test|web)\/[\w./-]*\w)/g;
/** A module named by the end of its path: `engine/instance-lease.ts`, `warm-pools.ts`. */
const SHORT = /`([\w-]+(?:\/[\w-]+)*\.(?:ts|mjs|c|h|sh|py))`/g;
const CITATION = /([\w-]+\.md)/g;
const SECTIONS = /^[,)]?\s*\(?\s*((?:"[^"]+"(?:\s*(?:,|and)\s*)?)+)/;

async function filesUnder(dir: string, ext: RegExp): Promise<string[]> {
  const entries = await readdir(join(ROOT, dir), { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile() && ext.test(e.name) && !e.parentPath.includes('node_modules'))
    .map((e) => relative(ROOT, join(e.parentPath, e.name)));
}

async function docs(): Promise<string[]> {
  return ['README.md', ...(await filesUnder('docs', /\.md$/))];
}

/** The text after each line's end up to the next line's, comment leaders dropped: a citation may wrap. */
function continuations(lines: readonly string[]): string[] {
  return lines.map((_, i) => ` ${(lines[i + 1] ?? '').replace(/^\s*(?:\*|\/\/)\s?/, '')}`);
}

const headingCache = new Map<string, string[]>();
async function headings(doc: string): Promise<string[]> {
  const cached = headingCache.get(doc);
  if (cached !== undefined) return cached;
  const found: string[] = [];
  for (const line of (await readFile(join(ROOT, doc), 'utf8')).split('\n')) {
    const h = /^#+\s+(.*)/.exec(line);
    if (h?.[1] !== undefined) found.push(h[1].trim());
    for (const b of line.matchAll(/\*\*([^*]+?)\*\*/g)) found.push((b[1] ?? '').trim().replace(/\.$/, ''));
  }
  headingCache.set(doc, found);
  return found;
}

/** Problems with the sections `file` cites, one line each. */
async function sectionProblems(file: string): Promise<string[]> {
  const problems: string[] = [];
  const lines = (await readFile(join(ROOT, file), 'utf8')).split('\n');
  const next = continuations(lines);
  for (const [i, line] of lines.entries()) {
    for (const m of line.matchAll(CITATION)) {
      const name = m[1] ?? '';
      const at = m.index ?? 0;
      const doc = name === 'README.md' && !line.slice(0, at).endsWith('docs/') ? name : `docs/${name}`;
      if (!existsSync(join(ROOT, doc))) continue; // not a doc of ours; the path checks cover `docs/...`
      const cited = SECTIONS.exec(`${line.slice(at + name.length)}${next[i]}`);
      if (cited?.[1] === undefined) continue;
      const known = await headings(doc);
      for (const s of cited[1].matchAll(/"([^"]+)"/g)) {
        const section = (s[1] ?? '').replace(/\.$/, '');
        if (!known.some((h) => h === section || h.startsWith(section))) {
          problems.push(`${file}:${i + 1} cites ${doc}, "${section}", which it has no heading for`);
        }
      }
    }
  }
  return problems;
}

test('every repository path the docs name exists', async () => {
  const missing: string[] = [];
  for (const file of await docs()) {
    const lines = (await readFile(join(ROOT, file), 'utf8')).split('\n');
    for (const [i, line] of lines.entries()) {
      for (const m of line.matchAll(ROOTED)) {
        const path = m[1] ?? '';
        // A pattern (`options-*.ts`, `test/<dir>/...`) names no one path.
        if (/^[-/]?[*<{]/.test(line.slice((m.index ?? 0) + path.length))) continue;
        if (!EXAMPLES.has(path) && !existsSync(join(ROOT, path))) missing.push(`${file}:${i + 1} ${path}`);
      }
    }
  }
  assert.deepEqual(missing, [], 'paths named in the docs that the repository does not have');
});

test('every module the docs name by a shorter path exists', async () => {
  const files = (await Promise.all(TREES.map((t) => filesUnder(t, /\.(?:ts|mjs|c|h|sh|py)$/)))).flat();
  const missing: string[] = [];
  for (const file of await docs()) {
    const lines = (await readFile(join(ROOT, file), 'utf8')).split('\n');
    for (const [i, line] of lines.entries()) {
      for (const m of line.matchAll(SHORT)) {
        const path = m[1] ?? '';
        if (!files.some((f) => f === path || f.endsWith(`/${path}`))) missing.push(`${file}:${i + 1} ${path}`);
      }
    }
  }
  assert.deepEqual(missing, [], 'modules named in the docs that no file of the repository is');
});

test('every path a comment in src/ names exists', async () => {
  const missing: string[] = [];
  for (const file of await filesUnder('src', /\.ts$/)) {
    const lines = (await readFile(join(ROOT, file), 'utf8')).split('\n');
    for (const [i, line] of lines.entries()) {
      for (const m of line.matchAll(ROOTED)) {
        const path = m[1] ?? '';
        // A path with an extension names a file; one without may be a URL path or an example.
        if (!/\.\w+$/.test(path) || path.startsWith('docs/openapi')) continue;
        if (!existsSync(join(ROOT, path))) missing.push(`${file}:${i + 1} ${path}`);
      }
    }
  }
  assert.deepEqual(missing, [], 'paths named in src/ that the repository does not have');
});

test('every doc section the docs and src/ cite exists', async () => {
  const files = [...(await docs()), ...(await filesUnder('src', /\.ts$/))];
  const problems = (await Promise.all(files.map(sectionProblems))).flat();
  assert.deepEqual(problems, [], 'citations of a section the doc does not have');
});

test('docs/architecture.md names every top-level part of src/', async () => {
  const map = await readFile(join(ROOT, 'docs/architecture.md'), 'utf8');
  const parts = (await readdir(join(ROOT, 'src'), { withFileTypes: true })).map((e) => `src/${e.name}`);
  assert.deepEqual(
    parts.filter((p) => !map.includes(p)),
    [],
    'parts of src/ the map does not name',
  );
});

test('docs/architecture.md names every library of package.json', async () => {
  const map = await readFile(join(ROOT, 'docs/architecture.md'), 'utf8');
  const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as {
    dependencies: Record<string, string>;
    devDependencies: Record<string, string>;
  };
  const names = [...Object.keys(pkg.dependencies), ...Object.keys(pkg.devDependencies)];
  // `@types/x` is named with its library; Biome and TypeScript by their names.
  const named = (n: string): boolean => {
    const plain = n.replace(/^@types\//, '').replace(/^@biomejs\/biome$/, 'Biome');
    return map.includes(n) || map.toLowerCase().includes(plain.toLowerCase());
  };
  assert.deepEqual(
    names.filter((n) => !named(n)),
    [],
    'dependencies the map does not name',
  );
});
