// The package's JavaScript (dist/) without a TypeScript compiler: each src/ file with its types
// stripped by Node.js itself (the transform Node applies when it runs src/ directly; the sources
// use erasable syntax only) and its relative `.ts` imports pointed at `.js`. The container image
// builds with it (its builder has no dev dependencies); `npm run build:dist` (tsc) makes the same
// files plus declarations for the npm package.
//
//   node scripts/build-dist-strip.mjs [OUT_DIR]   (default dist)
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { stripTypeScriptTypes } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = resolve(root, process.argv[2] ?? 'dist');
// Relative specifiers only ('./x.ts', '../y/z.ts'), in static and dynamic imports and re-exports.
const RELATIVE_TS = /(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(['"])(\.{1,2}\/[^'"]*?)\.ts\2/g;

async function* files(dir) {
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) yield* files(p);
    else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) yield p;
  }
}

await rm(out, { recursive: true, force: true });
let n = 0;
for await (const file of files(join(root, 'src'))) {
  const js = stripTypeScriptTypes(await readFile(file, 'utf8'), { mode: 'strip' }).replace(
    RELATIVE_TS,
    (_m, lead, q, path) => `${lead}${q}${path}.js${q}`,
  );
  const target = join(out, relative(join(root, 'src'), file)).replace(/\.ts$/, '.js');
  await mkdir(dirname(target), { recursive: true });
  await writeFile(target, js);
  n++;
}
console.log(`build-dist-strip: ${n} files into ${relative(root, out) || '.'}`);
