/**
 * Processes that survive the server (docker's exec agent keeps them): what the engine stores
 * with each attempt (`SpawnRequest.recoveryTag`) and how a restarted server rebuilds the
 * client-visible process from it and from what the backend kept. The seqs continue: chunks the
 * previous server published keep their seqs, the rest get the next ones
 * (docs/docker-backend.md, "Processes that survive the server").
 */
import { asProcessId, type ProcessId } from '../ids.ts';
import type { ProcessSpec } from './managed-process.ts';

/** Versioned, so a server never misreads a tag written by another version. */
const TAG_VERSION = 1;

/** The process's spec (its id as `processId`), and what the engine needs to go on with it. */
export interface RecoveryTag extends Pick<ProcessSpec, 'argv' | 'cwd' | 'mode'> {
  readonly processId: ProcessId;
  readonly createdAt: number;
  /** Wall-clock deadline of `timeoutMs`, if the start had one. */
  readonly timeoutAt?: number | undefined;
  /** Seq of the attempt's first event. */
  readonly seqBase: number;
  readonly sandboxed: boolean;
}

/** The tag stored with an attempt so that a restarted server can rebuild its process. */
export function encodeRecoveryTag(tag: RecoveryTag): string {
  return JSON.stringify({ v: TAG_VERSION, ...tag });
}

/** The tag, or undefined when it is not one this server wrote (then the process is let go). */
export function decodeRecoveryTag(text: string): RecoveryTag | undefined {
  try {
    const t = JSON.parse(text) as Record<string, unknown>;
    if (
      t['v'] !== TAG_VERSION ||
      typeof t['processId'] !== 'string' ||
      !Array.isArray(t['argv']) ||
      typeof t['cwd'] !== 'string'
    )
      return undefined;
    const mode = t['mode'];
    if (mode !== 'pty' && mode !== 'pipe' && mode !== 'pipe-no-stdin') return undefined;
    return {
      processId: asProcessId(t['processId']),
      argv: t['argv'].map(String),
      cwd: t['cwd'],
      mode,
      createdAt: Number(t['createdAt']) || Date.now(),
      timeoutAt: typeof t['timeoutAt'] === 'number' ? t['timeoutAt'] : undefined,
      seqBase: Number(t['seqBase']) || 1,
      sandboxed: t['sandboxed'] === true,
    };
  } catch {
    return undefined;
  }
}
