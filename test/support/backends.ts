/**
 * The backends a parameterised suite runs on: local always, docker when an engine answers
 * (under CI=true a missing engine is a failing test, registered by test/docker/engine.ts).
 */
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { engineReady } from '../docker/engine.ts';
import type { BackendKind } from './harness.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Whether this test file runs its `kind` cases here. `npm test` runs a suite parameterised by
 * backend alone in both of its groups (scripts/test.sh names such files in
 * EXEC_SERVER_TEST_SPLIT): its docker cases in the engine group, one file at a time, and its
 * local cases beside them in the other group (EXEC_SERVER_TEST_GROUP). Anywhere else, every one.
 */
export function backendSelected(kind: BackendKind): boolean {
  const group = process.env['EXEC_SERVER_TEST_GROUP'];
  const split = (process.env['EXEC_SERVER_TEST_SPLIT'] ?? '').split(' ');
  // The runner starts each file as its own process, the file as its main module.
  if (group === undefined || !split.includes(relative(ROOT, process.argv[1] ?? ''))) return true;
  return group === 'engine' ? kind === 'docker' : kind === 'local';
}

export const BACKENDS: readonly BackendKind[] = (
  engineReady ? (['local', 'docker'] as const) : (['local'] as const)
).filter(backendSelected);

/** How to look for leftover processes of a session (host for local, inside the container for docker). */
export function psCommand(): string[] {
  return ['sh', '-c', 'ps -o pid,args 2>/dev/null || ps'];
}
