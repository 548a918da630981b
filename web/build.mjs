#!/usr/bin/env node
// Bundles the web console (web/) into build/console/ with esbuild: one ES module, one
// stylesheet and index.html, with no external references (served offline by the server at
// /console/). Run by `npm run build` and by `npm ci` / `npm install` (postinstall).
// --postinstall: when the console's packages are absent (an install without them), say so and
// exit 0 instead of failing the install; a build error still fails.
import { copyFile, mkdir, rename, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, '..', 'build', 'console');
const postinstall = process.argv.includes('--postinstall');

let esbuild;
try {
  const require = createRequire(import.meta.url);
  for (const pkg of ['preact', '@xterm/xterm', '@xterm/addon-fit']) require.resolve(pkg);
  esbuild = await import('esbuild');
} catch (err) {
  const msg = `build-console: the console's packages are not installed (${err.message.split('\n')[0]}); /console/ will say it is not built`;
  if (postinstall) {
    console.error(msg);
    process.exit(0);
  }
  console.error(msg);
  process.exit(1);
}

// Built beside the output and swapped in, so a server starting meanwhile never reads half a build.
const staging = `${out}.tmp-${process.pid}`;
await rm(staging, { recursive: true, force: true });
await mkdir(join(staging, 'assets'), { recursive: true });
const result = await esbuild.build({
  entryPoints: { console: join(here, 'src', 'main.tsx') },
  outdir: join(staging, 'assets'),
  bundle: true,
  format: 'esm',
  target: ['es2022'],
  minify: true,
  sourcemap: false,
  legalComments: 'linked',
  jsx: 'automatic',
  jsxImportSource: 'preact',
  loader: { '.woff2': 'file', '.svg': 'file' },
  logLevel: 'warning',
  metafile: true,
});
await copyFile(join(here, 'index.html'), join(staging, 'index.html'));
const old = `${out}.old-${process.pid}`;
await rename(out, old).catch((err) => {
  if (err.code !== 'ENOENT') throw err;
});
await rename(staging, out);
await rm(old, { recursive: true, force: true });
const bytes = Object.values(result.metafile.outputs).reduce((n, o) => n + o.bytes, 0);
console.error(`build-console: build/console/ (${Math.round(bytes / 1024)} KiB)`);
