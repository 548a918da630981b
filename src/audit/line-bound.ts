/**
 * Every audit line is at most `MAX_LINE_BYTES` (docs/security-guarded.md, "The audit log"), so
 * a restarted server always finds the last complete line of its log within a bounded read, and
 * one request (a 300 KB argv) cannot make a line of any size. A record that would be longer is
 * shortened, its detail only, step by step: strings cut to a prefix that says how many bytes
 * were cut (`…[cut N bytes]`), then arrays and objects cut to their first items, each step
 * stronger, until it fits; `detail.cut` then sums up what was cut (`strings`, `bytes`, `items`).
 * The last resort keeps no detail but its size and SHA-256. A line that fits is left whole.
 */
import { createHash } from 'node:crypto';

/** The longest audit line, in bytes of UTF-8 without its newline. */
export const MAX_LINE_BYTES = 64 * 1024;

/** The fields before `detail`: server-made or from configuration, each kept within this. */
const FIELD_MAX_BYTES = 1024;

/** Each step: the longest string (UTF-8 bytes) and the most items of an array or object. */
const STEPS: ReadonlyArray<{ readonly text: number; readonly items: number }> = [
  { text: 8192, items: 4096 },
  { text: 1024, items: 256 },
  { text: 128, items: 32 },
];

/** One audit line's fields, in the order they are written. */
export interface AuditRecord {
  readonly seq: number;
  readonly time: string;
  readonly tenant: string | null;
  readonly principal: string;
  readonly remote: string | null;
  readonly session: string | null;
  readonly action: string;
  readonly detail: Record<string, unknown>;
  readonly prev: string | null;
}

interface Cut {
  strings: number;
  bytes: number;
  items: number;
}

const bytesOf = (s: string): number => Buffer.byteLength(s, 'utf8');

function cutString(s: string, max: number, cut: Cut): string {
  const size = bytesOf(s);
  if (size <= max) return s;
  const buf = Buffer.from(s, 'utf8');
  let end = max;
  // Never split a character: back off continuation bytes (10xxxxxx).
  while (end > 0 && ((buf[end] ?? 0) & 0xc0) === 0x80) end--;
  cut.strings++;
  cut.bytes += size - end;
  return `${buf.subarray(0, end).toString('utf8')}…[cut ${size - end} bytes]`;
}

function shrink(value: unknown, step: { text: number; items: number }, cut: Cut): unknown {
  if (typeof value === 'string') return cutString(value, step.text, cut);
  if (Array.isArray(value)) {
    cut.items += Math.max(0, value.length - step.items);
    return value.slice(0, step.items).map((v) => shrink(v, step, cut));
  }
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value);
    const kept = entries.slice(0, step.items).map(([k, v]) => [cutString(k, step.text, cut), shrink(v, step, cut)]);
    const out = Object.fromEntries(kept) as Record<string, unknown>;
    // Keys that became equal once cut are items lost too.
    cut.items += entries.length - Object.keys(out).length;
    return out;
  }
  return value;
}

function capField<T extends string | null>(value: T, cut: Cut): T {
  return (value === null ? value : cutString(value, FIELD_MAX_BYTES, cut)) as T;
}

/**
 * The text of `record` as one line of at most `MAX_LINE_BYTES`: as it is when it fits, else
 * with its detail shortened (see above). The bound holds for any detail: the fields before it
 * are capped at `FIELD_MAX_BYTES` each, and the last resort's detail is a few dozen bytes.
 */
export function boundedLine(record: AuditRecord): string {
  const whole = JSON.stringify(record);
  if (bytesOf(whole) <= MAX_LINE_BYTES) return whole;
  const headCut: Cut = { strings: 0, bytes: 0, items: 0 };
  const head = {
    ...record,
    tenant: capField(record.tenant, headCut),
    principal: capField(record.principal, headCut),
    remote: capField(record.remote, headCut),
    session: capField(record.session, headCut),
    action: capField(record.action, headCut),
  };
  // A plain JSON value from here on (dates and the like as JSON writes them).
  const detailText = JSON.stringify(record.detail);
  const plain = JSON.parse(detailText) as Record<string, unknown>;
  for (const step of STEPS) {
    const cut = { ...headCut };
    const detail = shrink(plain, step, cut) as Record<string, unknown>;
    const line = JSON.stringify({ ...head, detail: { ...detail, cut } });
    if (bytesOf(line) <= MAX_LINE_BYTES) return line;
  }
  const all = { bytes: bytesOf(detailText), sha256: createHash('sha256').update(detailText).digest('hex') };
  return JSON.stringify({ ...head, detail: { cut: { ...headCut, all } } });
}
