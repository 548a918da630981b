#!/usr/bin/env node
// The `exec-server` command. In production (NODE_ENV=production, as the container image sets)
// or in an installed package (no src/), it runs the package's built JavaScript (dist/, made by
// `npm run build:dist` and by `npm pack`'s prepack): no TypeScript loader nor type stripping in
// the server's memory (docs/benchmarks.md, "Server memory"). From a checkout it runs the
// TypeScript sources as they are (erasable syntax only: a Node.js that strips types itself,
// 22.18+ or 24, runs src/main.ts; an older 22 gets tsx's loader registered first), so
// `npm start` needs no build; EXEC_SERVER_DIST=1 or 0 forces either.
import { existsSync } from 'node:fs';

const dist = new URL('../dist/main.js', import.meta.url);
const src = new URL('../src/main.ts', import.meta.url);
const wanted = process.env.EXEC_SERVER_DIST;
const useDist =
  wanted === '1' ||
  (wanted !== '0' && existsSync(dist) && (process.env.NODE_ENV === 'production' || !existsSync(src)));

if (useDist || !existsSync(src)) {
  await import(dist.href);
} else {
  if (!process.features.typescript) {
    const { register } = await import('tsx/esm/api');
    register();
  }
  await import(src.href);
}
