/**
 * The backends a parameterised suite runs on: local always, docker when an engine answers
 * (under CI=true a missing engine is a failing test, registered by test/docker/engine.ts).
 */
import { engineReady } from '../docker/engine.ts';
import type { BackendKind } from './harness.ts';

export const BACKENDS: readonly BackendKind[] = engineReady ? ['local', 'docker'] : ['local'];

/** How to look for leftover processes of a session (host for local, inside the container for docker). */
export function psCommand(): string[] {
  return ['sh', '-c', 'ps -o pid,args 2>/dev/null || ps'];
}
