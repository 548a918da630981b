#!/usr/bin/env node
// The `exec-server` command. From a checkout it runs the TypeScript sources as they are
// (erasable syntax only: a Node.js that strips types itself, 22.18+ or 24, runs src/main.ts;
// an older 22 gets tsx's loader registered first), so `npm start` needs no build. An installed
// package has no src/ but the build of it (dist/, made by `npm pack`'s prepack): Node does not
// strip types under node_modules.
import { existsSync } from 'node:fs';

if (existsSync(new URL('../src/main.ts', import.meta.url))) {
  if (!process.features.typescript) {
    const { register } = await import('tsx/esm/api');
    register();
  }
  await import('../src/main.ts');
} else {
  await import('../dist/main.js');
}
