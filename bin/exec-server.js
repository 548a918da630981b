#!/usr/bin/env node
// The `exec-server` command. The sources are TypeScript with erasable syntax only, so a Node.js
// that strips types itself (22.18+, 24: `process.features.typescript`) runs src/main.ts as it
// is; an older 22 gets tsx's loader registered first.
if (!process.features.typescript) {
  const { register } = await import('tsx/esm/api');
  register();
}
await import('../src/main.ts');
