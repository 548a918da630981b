/**
 * Codex's model-facing truncation, as the Codex CLI does it (docs/protocol.md, "Tool facade"):
 * tokens are approximated as 4 bytes each, and output over the
 * budget keeps its beginning and end (split 50/50 on UTF-8 boundaries) with a
 * `…N tokens truncated…` marker in the middle, under a warning header.
 */

const BYTES_PER_TOKEN = 4;

/** `approx_token_count`: ceil(utf8 bytes / 4). */
export function approxTokenCount(text: string): number {
  return Math.ceil(Buffer.byteLength(text, 'utf8') / BYTES_PER_TOKEN);
}

/** The byte budget of `tokens` approximate tokens (the inverse of `approxTokenCount`). */
export function approxBytesForTokens(tokens: number): number {
  return tokens * BYTES_PER_TOKEN;
}

/** Rust's `str::lines().count()`: a trailing newline does not start another line. */
export function countLines(text: string): number {
  if (text === '') return 0;
  const parts = text.split('\n');
  return text.endsWith('\n') ? parts.length - 1 : parts.length;
}

/** Keeps the first `headBytes` and last `tailBytes` bytes of `text`, cut on character boundaries. */
function splitString(buf: Buffer, headBytes: number, tailBytes: number): { head: string; tail: string } {
  const len = buf.length;
  const tailStartTarget = Math.max(0, len - tailBytes);
  // A UTF-8 continuation byte is 10xxxxxx; a character starts at any other byte.
  const isStart = (i: number): boolean => i >= len || ((buf[i] ?? 0) & 0xc0) !== 0x80;
  // Largest character end <= headBytes.
  let prefixEnd = Math.min(headBytes, len);
  while (prefixEnd > 0 && !isStart(prefixEnd)) prefixEnd--;
  // First character start >= tailStartTarget.
  let suffixStart = tailStartTarget;
  while (suffixStart < len && !isStart(suffixStart)) suffixStart++;
  if (suffixStart < prefixEnd) suffixStart = prefixEnd;
  return { head: buf.subarray(0, prefixEnd).toString('utf8'), tail: buf.subarray(suffixStart).toString('utf8') };
}

/** `truncate_middle_with_token_budget(...).0`: the text cut to `maxTokens` approximate tokens. */
export function truncateMiddleTokens(text: string, maxTokens: number): string {
  if (text === '') return '';
  const buf = Buffer.from(text, 'utf8');
  const maxBytes = approxBytesForTokens(maxTokens);
  if (maxBytes === 0) return `…${Math.ceil(buf.length / BYTES_PER_TOKEN)} tokens truncated…`;
  if (buf.length <= maxBytes) return text;
  const left = Math.floor(maxBytes / 2);
  const { head, tail } = splitString(buf, left, maxBytes - left);
  const removedTokens = Math.ceil((buf.length - maxBytes) / BYTES_PER_TOKEN);
  return `${head}…${removedTokens} tokens truncated…${tail}`;
}

/** `formatted_truncate_text` with a token policy: unchanged when within budget, else a warning header plus the middle-truncated text. */
export function formattedTruncateText(text: string, maxTokens: number): string {
  if (Buffer.byteLength(text, 'utf8') <= approxBytesForTokens(maxTokens)) return text;
  return `Warning: truncated output (original token count: ${approxTokenCount(text)})\nTotal output lines: ${countLines(text)}\n\n${truncateMiddleTokens(text, maxTokens)}`;
}
