/**
 * The text block Codex shows its model for an `exec_command`/`write_stdin` result
 * (`ExecCommandToolOutput::response_text`), and the JSON the HTTP facade answers with.
 */
import { randomBytes } from 'node:crypto';
import type { ExecToolResult } from '../protocol/index.ts';
import { approxTokenCount, formattedTruncateText } from './truncation.ts';

/** Codex's default output budget of one tool answer, in approximate tokens. */
export const DEFAULT_MAX_OUTPUT_TOKENS = 10_000;

/** `generate_chunk_id`: 6 random hex characters. */
export function chunkId(): string {
  return randomBytes(3).toString('hex');
}

/** What a tool answer is built from: the raw output, how long it took and how the command stands. */
export interface ResultInput {
  readonly wallTimeMs: number;
  readonly exitCode?: number | undefined;
  readonly sessionId?: number | undefined;
  readonly rawOutput: string;
  readonly maxOutputTokens?: number | undefined;
  readonly sandboxDenied?: boolean | undefined;
  readonly warning?: string | undefined;
}

/** A tool answer as Codex builds it: the output truncated to its budget, and the text block the model reads. */
export function buildResult(input: ResultInput): ExecToolResult {
  const id = chunkId();
  const wall = input.wallTimeMs / 1000;
  const output = formattedTruncateText(input.rawOutput, input.maxOutputTokens ?? DEFAULT_MAX_OUTPUT_TOKENS);
  const originalTokenCount = approxTokenCount(input.rawOutput);
  const lines = [`Chunk ID: ${id}`, `Wall time: ${wall.toFixed(4)} seconds`];
  if (input.exitCode !== undefined) lines.push(`Process exited with code ${input.exitCode}`);
  if (input.sessionId !== undefined) lines.push(`Process running with session ID ${input.sessionId}`);
  lines.push(`Original token count: ${originalTokenCount}`, 'Output:', output);
  return {
    chunk_id: id,
    wall_time_seconds: Number(wall.toFixed(4)),
    ...(input.exitCode !== undefined ? { exit_code: input.exitCode } : {}),
    ...(input.sessionId !== undefined ? { session_id: input.sessionId } : {}),
    original_token_count: originalTokenCount,
    output,
    text: lines.join('\n'),
    ...(input.sandboxDenied ? { sandbox_denied: true } : {}),
    ...(input.warning !== undefined ? { warning: input.warning } : {}),
  };
}
