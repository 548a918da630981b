/**
 * What the agent kept of a process, rebuilt for the server that adopts it (a restarted server,
 * a fork, a session from a live template): its retained output cut into chunks at the
 * acknowledgement marks, each under the seq it was published as (docs/docker-backend.md,
 * "Processes that survive the server"; docs/snapshots.md, "Output seqs").
 */
import type { RecoveredProcess, SandboxType, StreamName } from '../../types.ts';
import type { ListedProcess } from './agent-connection.ts';

/** `l` with `extra` marks merged in (by end offset; the agent's own win on a tie). */
export function withMarks(
  l: ListedProcess,
  extra: ReadonlyArray<readonly [number, number]> | undefined,
): ListedProcess {
  if (extra === undefined || extra.length === 0) return l;
  const last = l.record.marks.at(-1)?.[1] ?? -1;
  const marks = [...l.record.marks, ...extra.filter(([, end]) => end > last)];
  return { ...l, record: { ...l.record, marks } };
}

/**
 * What the agent kept of one process, as the engine rebuilds it: the retained output cut at the
 * previous server's acknowledgement marks (each piece under the seq it had), the rest after.
 */
export function keptProcess(l: ListedProcess): RecoveredProcess {
  const newline = l.record.tag.indexOf('\n');
  const sandboxType: SandboxType = l.record.tag.startsWith('container-user\n') ? 'container-user' : 'none';
  const tag = newline < 0 ? '' : l.record.tag.slice(newline + 1);
  const chunks: Array<{ stream: StreamName; data: Buffer; seq?: number }> = [];
  const first = l.output[0]?.offset ?? l.record.totalOffset;
  let pos = first;
  const bytesBetween = (from: number, to: number): { stream: StreamName; data: Buffer } => {
    const parts: Buffer[] = [];
    let stream: StreamName | undefined;
    for (const o of l.output) {
      const start = Math.max(from, o.offset);
      const end = Math.min(to, o.offset + o.data.length);
      if (start >= end) continue;
      stream ??= o.stream ?? 'stdout';
      parts.push(o.data.subarray(start - o.offset, end - o.offset));
    }
    return { stream: stream ?? 'stdout', data: Buffer.concat(parts) };
  };
  const end = l.output.length > 0 ? Math.max(...l.output.map((o) => o.offset + o.data.length)) : l.record.totalOffset;
  for (const [seq, markEnd] of l.record.marks) {
    if (markEnd <= pos) continue;
    const piece = bytesBetween(pos, Math.min(markEnd, end));
    if (piece.data.length > 0) chunks.push({ ...piece, seq });
    pos = markEnd;
  }
  for (const o of l.output) {
    const start = Math.max(pos, o.offset);
    if (start >= o.offset + o.data.length) continue;
    chunks.push({ stream: o.stream ?? 'stdout', data: o.data.subarray(start - o.offset) });
  }
  return { tag, chunks, droppedBytes: first, endOffset: end, sandboxType };
}
