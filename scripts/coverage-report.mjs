// Test reporter for scripts/coverage.sh: prints the line coverage of src/ as one figure and a
// per-file table, counting the files of src/ that no process loaded as 0 % (except files of
// types only, which compile to nothing: there is nothing in them to run).
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { transformSync } from 'esbuild';

function sourceFiles(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(p);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [p] : [];
  });
}

export default async function* report(source) {
  let summary;
  let failed = 0;
  for await (const event of source) {
    if (event.type === 'test:coverage') summary = event.data.summary;
    if (event.type === 'test:fail') {
      failed += 1;
      yield `merge failed: ${event.data.details?.error?.message ?? event.data.name}\n`;
    }
  }
  if (summary === undefined) {
    yield failed ? '' : 'no coverage summary (was --experimental-test-coverage given?)\n';
    return;
  }
  const root = process.cwd();
  const rows = new Map();
  for (const f of summary.files) {
    const path = relative(root, f.path);
    if (path.startsWith('src/')) rows.set(path, { total: f.totalLineCount, covered: f.coveredLineCount });
  }
  for (const p of sourceFiles(join(root, 'src'))) {
    const path = relative(root, p);
    if (rows.has(path)) continue;
    const text = readFileSync(p, 'utf8');
    if (transformSync(text, { loader: 'ts' }).code.trim() === '') continue;
    const total = text.replace(/\n$/, '').split('\n').length;
    rows.set(path, { total, covered: 0, unloaded: true });
  }
  let total = 0;
  let covered = 0;
  const width = Math.max(...[...rows.keys()].map((k) => k.length));
  const lines = [];
  for (const [path, r] of [...rows].sort(([a], [b]) => a.localeCompare(b))) {
    total += r.total;
    covered += r.covered;
    const pct = r.total === 0 ? 100 : (100 * r.covered) / r.total;
    const counts = `${String(r.covered).padStart(5)}/${String(r.total).padEnd(5)}`;
    lines.push(`${path.padEnd(width)}  ${pct.toFixed(2).padStart(6)} %  ${counts}${r.unloaded ? '  (never loaded)' : ''}`);
  }
  yield `${'file'.padEnd(width)}  line %   covered/lines\n${lines.join('\n')}\n`;
  const pct = total === 0 ? 0 : (100 * covered) / total;
  yield `line coverage of src/: ${pct.toFixed(2)} % (${covered} of ${total} lines, ${rows.size} files)\n`;
}
