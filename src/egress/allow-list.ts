/**
 * A session's network allow-list (`network.allow`, docs/protocol.md), parsed once at session
 * creation into entries the decision (decision.ts) matches. Entry forms:
 *
 *   `*`                      any destination not refused by the address rules
 *   `host`, `host:port`      that name (any port, or that port)
 *   `*.domain[:port]`        every name below `domain` (not `domain` itself)
 *   `ip[:port]`              that address (IPv6 with a port in brackets: `[::1]:8080`)
 *   `cidr[:port]`            that range (`10.0.0.0/8`, `[fd00::/8]:443`)
 *
 * A malformed entry is refused with `EXEC_ERR_INVALID_PARAMS` naming the entry and why.
 */
import { BlockList, isIP, isIPv4 } from 'node:net';
import { execError } from '../errors.ts';
import { canonicalAddress } from './ip-address.ts';

/** Most entries one session may list. */
export const MAX_ALLOW_ENTRIES = 256;

export type AllowEntry =
  | { readonly kind: 'any'; readonly text: string }
  | { readonly kind: 'host'; readonly host: string; readonly port?: number | undefined; readonly text: string }
  | { readonly kind: 'suffix'; readonly domain: string; readonly port?: number | undefined; readonly text: string }
  | {
      readonly kind: 'cidr';
      readonly address: string;
      readonly prefix: number;
      readonly family: 'ipv4' | 'ipv6';
      /** True for a single address (`ip[:port]`, or a full-length prefix). */
      readonly exact: boolean;
      readonly port?: number | undefined;
      readonly text: string;
      readonly range: BlockList;
    };

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

function isHostName(name: string): boolean {
  if (name.length === 0 || name.length > 253) return false;
  return name.split('.').every((l) => LABEL.test(l) || l === '_' || /^_[a-z0-9-]{1,62}$/.test(l));
}

function parsePort(text: string): number | undefined {
  if (!/^\d{1,5}$/.test(text)) return undefined;
  const n = Number(text);
  return n >= 1 && n <= 65535 ? n : undefined;
}

/** `a:b` → [a, b] for a name or IPv4; `[v6]:b` → [v6, b]; a bare IPv6 (several colons) has no port. */
function splitPort(entry: string): { host: string; port?: string } | undefined {
  if (entry.startsWith('[')) {
    const close = entry.indexOf(']');
    if (close < 0) return undefined;
    const rest = entry.slice(close + 1);
    if (rest !== '' && !rest.startsWith(':')) return undefined;
    return rest === '' ? { host: entry.slice(1, close) } : { host: entry.slice(1, close), port: rest.slice(1) };
  }
  const colons = entry.split(':').length - 1;
  if (colons === 1) {
    const at = entry.indexOf(':');
    return { host: entry.slice(0, at), port: entry.slice(at + 1) };
  }
  return { host: entry };
}

/**
 * An `ip`/`cidr` entry. An IPv4-mapped one (`::ffff:10.0.0.0/104`) is its IPv4 range: the
 * decision judges a mapped address as the IPv4 address it names (decision.ts).
 */
function cidrEntry(host: string, port: number | undefined, text: string): AllowEntry | string {
  const slash = host.indexOf('/');
  let address = slash < 0 ? host : host.slice(0, slash);
  let version = isIP(address);
  if (version === 0) return `${address} is not an IP address`;
  const max = version === 4 ? 32 : 128;
  let prefix = max;
  if (slash >= 0) {
    const p = host.slice(slash + 1);
    if (!/^\d{1,3}$/.test(p) || Number(p) > max) return `prefix /${p} is not between 0 and ${max}`;
    prefix = Number(p);
  }
  const canonical = canonicalAddress(address);
  if (version === 6 && isIPv4(canonical) && prefix >= 96) {
    address = canonical;
    version = 4;
    prefix -= 96;
  }
  const family = version === 4 ? 'ipv4' : 'ipv6';
  const range = new BlockList();
  range.addSubnet(address, prefix, family);
  return { kind: 'cidr', address, prefix, family, exact: prefix === (version === 4 ? 32 : 128), port, text, range };
}

/** One entry, or why it is malformed. */
export function parseAllowEntry(raw: string): AllowEntry | string {
  const text = raw.trim().toLowerCase();
  if (text === '*') return { kind: 'any', text };
  if (text.length === 0 || text.length > 300) return 'empty or too long';
  const split = splitPort(text);
  if (split === undefined) return 'unbalanced brackets';
  let port: number | undefined;
  if (split.port !== undefined) {
    port = parsePort(split.port);
    if (port === undefined) return `port ${split.port} is not between 1 and 65535`;
  }
  const host = split.host.endsWith('.') ? split.host.slice(0, -1) : split.host;
  if (host.includes('/') || isIP(host) !== 0) return cidrEntry(host, port, text);
  if (text.startsWith('[')) return `${host} is not an IP address`;
  if (host.startsWith('*.')) {
    const domain = host.slice(2);
    return isHostName(domain) ? { kind: 'suffix', domain, port, text } : `${domain} is not a domain name`;
  }
  if (/^[\d.]+$/.test(host)) return `${host} is not an IP address`;
  return isHostName(host) ? { kind: 'host', host, port, text } : `${host} is not a host name`;
}

/**
 * The entries of `network.allow`, or `EXEC_ERR_INVALID_PARAMS` naming the first malformed one
 * (`detail.field`: `session.network.allow[i]`).
 */
export function parseAllowList(entries: readonly string[]): AllowEntry[] {
  if (entries.length > MAX_ALLOW_ENTRIES)
    throw execError('EXEC_ERR_INVALID_PARAMS', `session.network.allow lists more than ${MAX_ALLOW_ENTRIES} entries`, {
      detail: { field: 'session.network.allow' },
    });
  return entries.map((raw, i) => {
    const parsed = parseAllowEntry(raw);
    if (typeof parsed !== 'string') return parsed;
    throw execError('EXEC_ERR_INVALID_PARAMS', `session.network.allow[${i}] ${JSON.stringify(raw)}: ${parsed}`, {
      detail: { field: `session.network.allow[${i}]`, entry: raw, reason: parsed },
    });
  });
}

/** Whether `address` (an IPv4 or IPv6 literal) lies in the entry's range. */
export function cidrContains(entry: Extract<AllowEntry, { kind: 'cidr' }>, address: string): boolean {
  const v4 = isIPv4(address);
  if (v4 !== (entry.family === 'ipv4')) return false;
  return entry.range.check(address, v4 ? 'ipv4' : 'ipv6');
}
