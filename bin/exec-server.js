#!/usr/bin/env node
// The `exec-server` command: registers tsx's loader, then runs the TypeScript entry point.
import { register } from 'tsx/esm/api';

register();
await import('../src/main.ts');
