/**
 * IP literals as the egress decision (decision.ts) sees them: one canonical spelling per
 * address, and the IPv4 address an IPv6 one embeds (docs/architecture.md, "Egress"). An IPv6
 * literal can name an IPv4 destination in several ways; judging only its IPv6 spelling let
 * `::7f00:1` or `64:ff9b::7f00:1` through a `*` entry, so every such form is recognised here.
 */
import { isIP } from 'node:net';

/** An IPv6 translation or tunnelling form and the IPv4 address it carries, if any. */
export interface EmbeddedIPv4 {
  /** The form, as a reason names it: `NAT64`, `6to4`, `Teredo`... */
  readonly form: string;
  /** The IPv4 address it reaches; undefined where the prefix length decides where it sits. */
  readonly ipv4?: string | undefined;
}

function v4Bytes(text: string): number[] {
  return text.split('.').map(Number);
}

/** The 16 bytes of an IPv6 literal (already checked by `isIP`). */
function v6Bytes(text: string): number[] {
  let s = text.toLowerCase();
  const tail: number[] = [];
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (dotted?.[1] !== undefined) {
    tail.push(...v4Bytes(dotted[1]));
    s = s.slice(0, -dotted[1].length);
    // `::1.2.3.4` leaves `::`; `::ffff:1.2.3.4` leaves `::ffff:`.
    if (s.endsWith(':') && !s.endsWith('::')) s = s.slice(0, -1);
  }
  const [head = '', rest] = s.split('::');
  const groups = (part: string): number[] => (part === '' ? [] : part.split(':').map((g) => Number.parseInt(g, 16)));
  const left = groups(head);
  const right = groups(rest ?? '');
  const missing = 8 - tail.length / 2 - left.length - right.length;
  const words = [...left, ...Array<number>(rest === undefined ? 0 : missing).fill(0), ...right];
  const bytes = words.flatMap((w) => [w >> 8, w & 0xff]);
  return [...bytes, ...tail];
}

function v4Text(bytes: readonly number[]): string {
  return bytes.join('.');
}

/** RFC 5952: lower case, the longest run of two or more zero groups as `::` (the first on a tie). */
function v6Text(bytes: readonly number[]): string {
  const words: number[] = [];
  for (let i = 0; i < 16; i += 2) words.push(((bytes[i] ?? 0) << 8) | (bytes[i + 1] ?? 0));
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j === i ? i + 1 : j;
  }
  const hex = (ws: number[]): string => ws.map((w) => w.toString(16)).join(':');
  if (best < 0) return hex(words);
  return `${hex(words.slice(0, best))}::${hex(words.slice(best + bestLen))}`;
}

function startsWith(bytes: readonly number[], prefix: readonly number[]): boolean {
  return prefix.every((b, i) => bytes[i] === b);
}

const MAPPED = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];

/**
 * One spelling per address: an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, `::ffff:7f00:1`, any
 * zero-padding) is the IPv4 address itself; any other IPv6 address is in RFC 5952 form; IPv4 is
 * unchanged. A string that is not an IP literal is returned lower-cased.
 */
export function canonicalAddress(address: string): string {
  const version = isIP(address);
  if (version === 4) return address;
  if (version !== 6) return address.toLowerCase();
  const bytes = v6Bytes(address);
  return startsWith(bytes, MAPPED) ? v4Text(bytes.slice(12)) : v6Text(bytes);
}

/**
 * The IPv4 address a canonical IPv6 address carries in a translation or tunnelling form (not
 * the mapped form, which `canonicalAddress` already turned into IPv4): IPv4-compatible
 * `::a.b.c.d`, IPv4-translated `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`,
 * 6to4 `2002::/16`, Teredo `2001::/32` (its client's address, stored inverted). Undefined for any
 * other address (IPv4 included).
 */
export function embeddedIPv4(address: string): EmbeddedIPv4 | undefined {
  if (isIP(address) !== 6) return undefined;
  const b = v6Bytes(address);
  const last = v4Text(b.slice(12));
  // `::` and `::1` share the IPv4-compatible prefix but are the unspecified and loopback addresses.
  if (startsWith(b, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]))
    return b.slice(12, 15).every((x) => x === 0) && (b[15] ?? 0) <= 1
      ? undefined
      : { form: 'IPv4-compatible', ipv4: last };
  if (startsWith(b, [0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0])) return { form: 'IPv4-translated', ipv4: last };
  if (startsWith(b, [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0])) return { form: 'NAT64', ipv4: last };
  // Local-use NAT64 prefixes may be any length within /48: where the address sits varies.
  if (startsWith(b, [0, 0x64, 0xff, 0x9b, 0, 1])) return { form: 'NAT64 (local-use prefix)' };
  if (startsWith(b, [0x20, 0x02])) return { form: '6to4', ipv4: v4Text(b.slice(2, 6)) };
  if (startsWith(b, [0x20, 0x01, 0, 0])) return { form: 'Teredo', ipv4: v4Text(b.slice(12).map((x) => x ^ 0xff)) };
  return undefined;
}
