/**
 * What an agent replays after LIST (every kept process, its retained output, its exit), collected
 * until LIST_END. Bounded: the agent is root's in a `danger-full-access` container and may
 * replay without end (docs/security-agent-link.md), so a list longer than any agent keeps
 * (processes, retained bytes) is refused rather than held in the server's memory.
 */
import {
  AGENT_MAX_PAYLOAD,
  AGENT_MAX_PROCS,
  FromAgent,
  parseProcRecord,
  type AgentFrame,
  type ProcRecord,
} from './agent-protocol.ts';

/** A kept process as the agent replayed it after attaching. */
export interface ListedProcess {
  readonly handle: number;
  readonly record: ProcRecord;
  /** Retained output, in order (copies). */
  readonly output: Array<{ stream: AgentFrame['stream']; offset: number; data: Buffer }>;
  exit: Buffer | undefined;
}

/** Collects an agent's replay after LIST, bounded so that an agent cannot make the server hold without end. */
export class AgentListing {
  readonly #procs = new Map<number, ListedProcess>();
  readonly #bytes = new Map<number, number>();
  /** Retained output a process may replay: the agent's retention, plus one frame straddling its start. */
  readonly #limit: number;
  readonly done: (l: ListedProcess[]) => void;

  constructor(retentionBytes: number, done: (l: ListedProcess[]) => void) {
    this.#limit = retentionBytes + AGENT_MAX_PAYLOAD;
    this.done = done;
  }

  /**
   * Takes `f` if it belongs to the list: `taken`, `end` (LIST_END: call `finish`), `other` (a
   * live frame), or why the list cannot be an agent's.
   */
  take(f: AgentFrame): 'taken' | 'end' | 'other' | { refused: string } {
    if (f.type === FromAgent.LIST_END) return 'end';
    if (f.type === FromAgent.PROC) {
      if (this.#procs.size >= AGENT_MAX_PROCS && !this.#procs.has(f.handle))
        return { refused: `listed more than ${AGENT_MAX_PROCS} processes` };
      this.#procs.set(f.handle, { handle: f.handle, record: parseProcRecord(f.payload), output: [], exit: undefined });
      return 'taken';
    }
    const p = this.#procs.get(f.handle);
    if (p && f.type === FromAgent.OUTPUT) {
      const bytes = (this.#bytes.get(f.handle) ?? 0) + f.payload.length - 8;
      if (bytes > this.#limit) return { refused: `replayed more than ${this.#limit} bytes of process ${f.handle}` };
      this.#bytes.set(f.handle, bytes);
      p.output.push({
        stream: f.stream,
        offset: Number(f.payload.readBigUInt64LE(0)),
        data: Buffer.from(f.payload.subarray(8)),
      });
      return 'taken';
    }
    if (p && f.type === FromAgent.EXIT) {
      p.exit = Buffer.from(f.payload);
      return 'taken';
    }
    return 'other';
  }

  finish(): void {
    this.done([...this.#procs.values()]);
  }
}
